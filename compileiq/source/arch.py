"""Which GPU architecture a build targets: the names accepted, the default, the machine's own GPU."""

from __future__ import annotations

import re
import shutil
import subprocess

DEFAULT_ARCH = "sm_90"
ARCH = re.compile(r"sm_[1-9]\d{1,2}[af]?")  # what --arch, tune.toml and an ACF accept: sm_90, sm_90a, sm_100f


def detect_arch() -> str | None:
    """The first GPU's ``sm_XY`` via nvidia-smi, or None without a usable nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    cmd = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    first = (proc.stdout.strip().splitlines() or [""])[0].strip()
    match = re.fullmatch(r"(\d+)\.(\d+)", first)
    return f"sm_{match.group(1)}{match.group(2)}" if match else None
