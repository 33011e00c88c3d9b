"""How a list of studies names each one's kernel, so that studies of different files are told apart.

A study key's ``kernel`` is the file's stem: every HeCBench program is ``src/<name>-cuda/main.cu``,
so its studies all read "main". Where studies of one kernel name recorded different paths
(`recorded_sources.decided_path`), each is named by the shortest end of its path that no other of
those paths ends with (``a-cuda/main.cu``, ``b-cuda/main.cu``); elsewhere (one file, or no path
recorded: a study from before paths were recorded, an imported one) by its kernel name as before.
`compileiq show`'s table and its ``--json`` (``kernel_shown``) take the name from here.
"""

from __future__ import annotations

from collections.abc import Sequence


def kernel_labels(kernels: Sequence[tuple[str, str | None]]) -> list[str]:
    """For each (kernel name, recorded path or None): the name the list shows (see the module)."""
    paths: dict[str, set[tuple[str, ...]]] = {}
    for name, path in kernels:
        if path is not None:
            paths.setdefault(name, set()).add(tuple(path.split("/")))
    return [name if path is None else _shortest(tuple(path.split("/")), paths[name] - {tuple(path.split("/"))}) or name
            for name, path in kernels]


def _shortest(parts: tuple[str, ...], others: set[tuple[str, ...]]) -> str | None:
    """The shortest end of `parts` that none of `others` ends with (all of it where each shorter end
    is shared); None where there are no others to tell it from."""
    if not others:
        return None
    for n in range(1, len(parts) + 1):
        if all(other[-n:] != parts[-n:] for other in others):
            return "/".join(parts[-n:])
    return "/".join(parts)
