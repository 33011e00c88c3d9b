"""What to put in tune.toml when the preprocessor cannot find a header: the include folder, found
near the kernel where the project keeps it (cuda-samples' ``Common/``, a project's ``include/``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

_NOT_FOUND = re.compile(r"fatal error: ([\w./+-]+): No such file or directory")
_LEVELS_UP = 4  # the kernel's folder and its ancestors: Samples/<group>/<sample>/ -> Common/ is 3 up
_FOLDERS_PER_LEVEL = 64  # subfolders of each ancestor looked into (sorted, hidden ones skipped)


def missing_header_hint(error: str, kernel_dir: Path) -> str:
    """`` (…include_dirs…)`` for a "No such file" error of the preprocessor; "" for any other."""
    match = _NOT_FOUND.search(error)
    if match is None:
        return ""
    folder = find_header_folder(match[1], kernel_dir)
    if folder is None:
        return " (add the folder that holds it to include_dirs in tune.toml, relative to the kernel's folder)"
    return f' (found in {folder}: add include_dirs = ["{folder}"] to tune.toml)'


def find_header_folder(name: str, kernel_dir: Path) -> str | None:
    """The folder, relative to ``kernel_dir``, of the nearest ``name`` in an ancestor of it or in
    one of an ancestor's subfolders; None when there is none within reach."""
    if name.startswith("/") or ".." in Path(name).parts:
        return None
    for ancestor in [kernel_dir, *kernel_dir.parents][:_LEVELS_UP]:
        if ancestor == ancestor.parent:  # never the file system's root
            break
        for folder in [ancestor, *_subfolders(ancestor)]:
            if (folder / name).is_file():
                return Path(os.path.relpath(folder, kernel_dir)).as_posix()
    return None


def _subfolders(folder: Path) -> list[Path]:
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir() and not entry.name.startswith("."))
    except OSError:
        return []
    return [folder / name for name in names[:_FOLDERS_PER_LEVEL]]
