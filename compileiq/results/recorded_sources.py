"""Which source bundle, base flags and kernel file a study's run tuned, as the run recorded them.

The study key's ``source_sha256`` is no hash of the sources alone (`core.key_labels`): a run
records the source bundle's hash (what its ACF's ``[kernel] source_sha256`` holds: the files and
the base flags together), a hash of its files and their paths alone, and the kernel's base flags
(the fixed nvcc flags every variant is built with: tune.toml's ``nvcc_flags``, or a compile
command's, canonical spelling, include folders aside) in its decision (`decision_entry`). The
report shows the bundle's hash from the study's latest deciding run (`recorded_bundle`) as
"source bundle sha256", and `report --compare` says whether the files differ (`recorded_files`)
and names the flags that do (`recorded_flags`), and a register cap among them as the base flag it is
(`fixed_cap`); the study list names the flags that tell studies of one file apart (`decided_flags`,
`decided_files`: `listed_base_flags`). A run row is untrusted: anything but a sha256 in hex, or a
short list of short printable flags, is not shown.

The study key's ``kernel`` is the file's name alone (``main`` for HeCBench's every
``src/<name>-cuda/main.cu``), so a run also records the kernel's path (`kernel_path`): relative to
the working directory, never less than its folder and its name. The views read it back
(`decided_path`, `recorded_path`) only where it is a short printable relative path with no ``.``
or ``..`` part; a study whose runs recorded none (before 2026-12-07, or imported) has none.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from compileiq.core.records import RunRecord
from compileiq.results.recorded_decision import latest_decision
from compileiq.source.base_flags import CAPPED, BaseFlags
from compileiq.source.spec import KernelSpec, SourceBundle

KEY = "source_bundle_sha256"  # the decision's key
FILES_KEY = "source_files_sha256"  # the bundle's files and paths, without its flags
FLAGS_KEY = "base_flags"  # the decision's key for the base flags
MAX_FLAGS = 256  # more recorded flags than this: not shown
PATH_KEY = "kernel_path"  # the decision's key: the kernel's path (`kernel_path`)
MAX_PATH = 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")
_FLAG = re.compile(r"[!-~]{1,200}")  # printable ASCII, no space: what a canonical base flag is
_CAP = re.compile(r"-maxrregcount=[0-9]{1,4}")


def decision_entry(bundle: SourceBundle, kernel: KernelSpec) -> dict[str, Any]:
    """What a run adds to its recorded decision: the hash of the source bundle it tuned, the base
    flags it built every variant with, and the kernel file's path (`kernel_path`) where one can be
    recorded."""
    path = kernel_path(kernel.source)
    return ({KEY: bundle.sha256, FILES_KEY: files_sha256(bundle), FLAGS_KEY: list(kernel.nvcc_flags.flags)}
            | ({PATH_KEY: path} if path is not None else {}))


def files_sha256(bundle: SourceBundle) -> str:
    """The hash of the bundle's files, their paths and include layout, without its base flags (which
    the bundle's own hash holds too): two builds of the same files with other flags have the same."""
    digest = hashlib.sha256(json.dumps([bundle.main, bundle.include_args]).encode())
    for rel, content in bundle.files:
        digest.update(f"{rel}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def kernel_path(source: Path, cwd: Path | None = None) -> str | None:
    """The path a run records for its kernel file `source` (absolute): relative to `cwd` (default:
    the working directory) where the file lies under it, never less than its folder and its name
    (run in ``a-cuda/`` itself: ``a-cuda/main.cu``); elsewhere its folder and name. None where
    that is no path the views would show (`path_problem`)."""
    try:
        relative = source.relative_to((cwd or Path.cwd()).resolve()).parts
    except (OSError, ValueError):  # outside it, or a working directory removed
        relative = ()
    named = source.parts[1:] if source.is_absolute() else source.parts
    text = "/".join(named[-max(len(relative), 2):])
    return text if path_problem(text) is None else None


def path_problem(path: Any, kernel: str | None = None) -> str | None:
    """Why a recorded kernel path is not shown (a run row is untrusted), or None; with the study's
    `kernel` (the file's stem: `KernelSpec.name`), a path to a file of another name is not its path
    (a forged ``a\\..\\etc/passwd`` would list the kernel as "passwd")."""
    if not isinstance(path, str) or not 0 < len(path) <= MAX_PATH or not path.isprintable():
        return f"not printable text of 1 to {MAX_PATH} characters"
    if path.startswith("/") or "\\" in path or any(part in ("", ".", "..") for part in path.split("/")):
        return "not a relative path of named parts"
    if kernel is not None and PurePosixPath(path).stem != kernel:
        return f"not a path to a file named {kernel}"
    return None


def decided_path(decision: Any, kernel: str) -> str | None:
    """The path of the study's `kernel` a recorded decision names (the study list reads the latest
    run's decision alone), None where it names none usable."""
    found = decision.get(PATH_KEY) if isinstance(decision, dict) else None
    return found if path_problem(found, kernel) is None else None


def recorded_path(runs: Sequence[RunRecord], kernel: str) -> str | None:
    """The path of the study's `kernel` its latest deciding run recorded; None for a run that
    recorded none (before this was recorded, an imported study) or no valid one."""
    latest = latest_decision(runs)
    return decided_path(latest.decision if latest is not None else None, kernel)


def recorded_bundle(runs: Sequence[RunRecord]) -> str | None:
    """The source bundle's hash the study's latest deciding run recorded; None for a run that recorded
    none (before this was recorded, an imported study) or no valid one."""
    return _sha256(_recorded(runs, KEY))


def recorded_files(runs: Sequence[RunRecord]) -> str | None:
    """The hash of the source files alone (`files_sha256`) the study's latest deciding run recorded;
    None as `recorded_bundle`."""
    return _sha256(_recorded(runs, FILES_KEY))


def decided_files(decision: Any) -> str | None:
    """The hash of the source files alone a recorded decision names (the study list reads the latest
    run's decision alone), None where it names none usable."""
    return _sha256(decision.get(FILES_KEY) if isinstance(decision, dict) else None)


def recorded_flags(runs: Sequence[RunRecord]) -> tuple[str, ...] | None:
    """The base flags the study's latest deciding run recorded, in its order; None for a run that
    recorded none (before they were recorded, an imported study) or a damaged list: anything but a
    list of at most MAX_FLAGS printable flags without spaces, each at most 200 characters."""
    latest = latest_decision(runs)
    return decided_flags(latest.decision if latest is not None else None)


def decided_flags(decision: Any) -> tuple[str, ...] | None:
    """The base flags a recorded decision names (the study list reads the latest run's decision
    alone), None where it names none usable (`recorded_flags`)."""
    found = decision.get(FLAGS_KEY) if isinstance(decision, dict) else None
    if not isinstance(found, list) or len(found) > MAX_FLAGS:
        return None
    if not all(isinstance(f, str) and _FLAG.fullmatch(f) for f in found):
        return None
    return tuple(found)


def fixed_cap(flags: Sequence[str] | None) -> str | None:
    """nvcc's register cap among recorded base flags (the last, which nvcc takes), e.g.
    "-maxrregcount=64": every build of the study gets it, so the searched ``ptxas.maxrregcount``
    is left out of its space (`base_flags.register_cap`). None where the flags hold none, were not
    recorded, or hold a cap that is no number (a run row is untrusted)."""
    cap = BaseFlags(tuple(flags)).register_cap if flags is not None else None
    return cap if cap is not None and _CAP.fullmatch(cap) else None


def fixed_settings(flags: Sequence[str] | None) -> dict[str, str]:
    """The searched settings recorded base flags fix, each as the flag that fixes it:
    {"ptxas.maxrregcount": "-maxrregcount=64"} (`fixed_cap`), {} where none."""
    cap = fixed_cap(flags)
    return {CAPPED: cap} if cap is not None else {}


def _sha256(found: object) -> str | None:
    return found if isinstance(found, str) and _SHA256.fullmatch(found) else None


def _recorded(runs: Sequence[RunRecord], key: str) -> object:
    latest = latest_decision(runs)
    return latest.decision.get(key) if latest is not None and latest.decision is not None else None
