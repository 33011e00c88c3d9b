"""What to do when the installed nvcc does not build the arch a kernel is tuned for: nvcc 13.0
dropped sm_50..sm_72 (`nvcc fatal : Unsupported gpu architecture 'sm_60'`), so a compile command
or tune.toml written for an older toolkit stops the run at its first preprocessing. The error
names the archs this nvcc builds (`nvcc --list-gpu-arch`) and how to tune for one of them."""

from __future__ import annotations

import os
import re
import subprocess

from compileiq.core.tool_environment import for_tools
from compileiq.core.toolchain import ToolchainError, find_toolchain

_UNSUPPORTED = re.compile(r"Unsupported gpu architecture '((?:sm|compute|lto)_[0-9]+[a-z]?)'")
_LISTED = re.compile(r"^compute_([0-9]+)[a-z]?$", re.MULTILINE)


def unsupported_arch(error: str) -> str | None:
    """The arch an nvcc error says this nvcc does not build; None for any other error."""
    found = _UNSUPPORTED.search(error)
    return found.group(1) if found else None


def listed_archs(nvcc: str) -> tuple[int, ...]:
    """The arch numbers `nvcc --list-gpu-arch` lists (75, 80, ...), in order; () where it lists none."""
    try:
        done = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=30, check=False,
                              env=for_tools(os.environ), errors="replace")
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(sorted({int(n) for n in _LISTED.findall(done.stdout)}))


def unsupported_arch_hint(error: str, nvcc: str) -> str:
    """`` (…what to do…)`` where `error` says nvcc does not build the arch asked for; "" else."""
    arch = unsupported_arch(error)
    if arch is None:
        return ""
    archs = listed_archs(nvcc)
    try:
        found = find_toolchain()
        named = f"nvcc {found.nvcc_version}" if found.nvcc == nvcc else "this nvcc"
    except ToolchainError:
        named = "this nvcc"
    builds = f"{named} builds sm_{archs[0]} and newer, as" if archs else f"{named} does not build it: see"
    return (f" ({builds} `nvcc --list-gpu-arch` lists: pass tune --arch sm_XY for your GPU, one it "
            f"lists; {arch} needs an older CUDA toolkit)")
