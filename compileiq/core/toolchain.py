"""Find the CUDA compilers and read their versions."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from compileiq.core.errors import CompileIQError
from compileiq.core.tool_environment import for_tools


class ToolchainError(CompileIQError):
    """nvcc or ptxas is missing or unusable."""


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    ptxas: str
    nvcc_version: str  # "13.0"
    ptxas_version: str
    nvcc_build: str  # full build string, part of every cache key

    @property
    def label(self) -> str:
        return f"nvcc {self.nvcc_version} ({self.nvcc_build})"


_RELEASE = re.compile(r"release (\d+\.\d+)")
_TOP = re.compile(r"^#\$ TOP=(.+)$", re.MULTILINE)
_BUILD = re.compile(r"Build (\S+)")


def _find(tool: str) -> str:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [Path(cuda_home) / "bin" / tool] if cuda_home else []
    found = shutil.which(tool)
    if found:
        candidates.append(Path(found))
    candidates.append(Path("/usr/local/cuda/bin") / tool)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise ToolchainError(f"{tool} not found: install the CUDA toolkit or set CUDA_HOME")


def _version_text(executable: str) -> str:
    try:
        done = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=30, check=False, env=for_tools(os.environ),
            errors="replace",  # a wrapper that prints bytes that are not UTF-8: no traceback
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolchainError(f"cannot run {executable} --version: {error}") from error
    return done.stdout


def _release(text: str, executable: str) -> str:
    match = _RELEASE.search(text)
    if not match:
        raise ToolchainError(f"cannot read the version of {executable}")
    return match.group(1)


@lru_cache(maxsize=1)
def find_toolchain() -> Toolchain:
    """Locate nvcc and ptxas (CUDA_HOME, PATH, /usr/local/cuda) and read their versions."""
    nvcc, ptxas = _find("nvcc"), _find("ptxas")
    nvcc_text, ptxas_text = _version_text(nvcc), _version_text(ptxas)
    build = _BUILD.search(nvcc_text)
    return Toolchain(
        nvcc=nvcc,
        ptxas=ptxas,
        nvcc_version=_release(nvcc_text, nvcc),
        ptxas_version=_release(ptxas_text, ptxas),
        nvcc_build=build.group(1) if build else _release(nvcc_text, nvcc),
    )


@lru_cache(maxsize=8)
def cuda_root(nvcc: str) -> Path:
    """The toolkit's own folder as nvcc reports it (`nvcc --dryrun`'s TOP), not the folder above the
    `nvcc` on PATH: that may be a wrapper script (ccache, conda, spack, a module system, ~/bin/nvcc)
    in a folder that also holds the user's project. Falls back to that guess if nvcc says nothing."""
    argv = [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=for_tools(os.environ))
        found = _TOP.search(done.stdout + done.stderr)
    except (OSError, subprocess.SubprocessError):
        found = None
    top = Path(found.group(1).strip()) if found else Path(nvcc).resolve().parent.parent
    return Path(os.path.normpath(top))
