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
_PTXAS_ARCH = re.compile(r"^#\$ .*\bptxas\b.*?-arch=(sm_[0-9]+[a-z]?)\b", re.MULTILINE)


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
def _dryrun(nvcc: str) -> str | None:
    """What `nvcc --dryrun` prints for a device build of an empty file with no arch flag: read once
    per nvcc (its toolkit folder, its default arch); None where nvcc cannot be run."""
    argv = [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=for_tools(os.environ),
                              errors="replace")
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout + done.stderr


def cuda_root(nvcc: str) -> Path:
    """The toolkit's own folder as nvcc reports it (`nvcc --dryrun`'s TOP), not the folder above the
    `nvcc` on PATH: that may be a wrapper script (ccache, conda, spack, a module system, ~/bin/nvcc)
    in a folder that also holds the user's project. Falls back to that guess if nvcc says nothing."""
    found = _TOP.search(_dryrun(nvcc) or "")
    top = Path(found.group(1).strip()) if found else Path(nvcc).resolve().parent.parent
    return Path(os.path.normpath(top))


def default_arch(nvcc: str) -> str | None:
    """The arch nvcc builds machine code for when a command names none (nvcc 13.0: sm_75, with
    compute_75 PTX beside it), as its `--dryrun` hands ptxas `-arch=sm_XY`: measured from the
    installed nvcc, never assumed. None where nvcc does not say."""
    found = _PTXAS_ARCH.search(_dryrun(nvcc) or "")
    return found.group(1) if found else None
