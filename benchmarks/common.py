"""Shared bits of the benchmark scripts (run them from the repository root)."""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

from compileiq import __version__, app
from compileiq.runner import SilentProgress
from compileiq.toolchain import find_toolchain

ROOT = Path(__file__).resolve().parent.parent
KERNELS = sorted((ROOT / "kernels").glob("*/*.cu"))


def fresh_db() -> str:
    folder = Path(tempfile.mkdtemp(prefix="compileiq-bench-"))
    return f"sqlite:///{folder / 'bench.db'}"


def machine() -> str:
    tools = find_toolchain()
    return f"{platform.node()} ({os.cpu_count()} CPUs), nvcc {tools.nvcc_version}, compileiq {__version__}"


def tune(kernel: Path, db: str, **options) -> app.TuneReport:
    out = Path(tempfile.mkdtemp(prefix="compileiq-acf-")) / f"{kernel.stem}.acf.toml"
    return app.tune(app.TuneOptions(kernel=kernel, db=db, out=out, **options), SilentProgress())
