"""Whether a tuned macro changes the code at all: a macro the build shadows (Rodinia's srad passes
-DRD_WG_SIZE_0=16, and srad.h gives RD_WG_SIZE_0 precedence over the RD_WG_SIZE it tunes) builds
the same code at every value, while launch facts that read it score an occupancy the program
never launches. Found before any build by preprocessing the kernel (`nvcc -E`) at the macro's first
value and at its others: the device side first (it holds the host code too, bar what
`#ifndef __CUDA_ARCH__` hides), the host side only when that is the same. A macro of one value
has no other to compare with: it is compared with a value no code spells (`_UNSPELLED`), so one no
file reads (a misplaced `entries = ["nope"]` under [tune.defines]) is refused, and one read at
the kernel's own default (`UNROLL = [1]` over `#define UNROLL 1`) is not. A macro that changes
the host code alone (a launch size) changes the program and stays tuned.

One preprocessor run at the defaults, then typically one per tuned macro, as many at a time as
there are CPUs; only a macro that changes nothing costs a run per value and side.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from compileiq.core.processes import COMPILER_MEMORY, run_tool, scratch_dir
from compileiq.source.kernel import DEPENDENCY_TIMEOUT_S, preprocessor_args
from compileiq.source.macros import MacroError
from compileiq.source.spec import KernelSpec

SIDES = {"device": (), "host": ("-Xcompiler", "-U__CUDA_ARCH__")}  # nvcc -E preprocesses for the device


def check_macros_change_code(spec: KernelSpec, nvcc: str) -> None:
    """MacroError naming the first tuned macro whose values all preprocess to the same device and
    host code (one value: the same code as at a value no code spells)."""
    tuned = list(spec.tuned_defines)
    if not tuned:
        return
    with scratch_dir("macros") as scratch:
        texts = Preprocessed(spec, nvcc, Path(scratch))
        # the runs every check needs, side by side: the defaults and each macro's second value (or none)
        texts.prefetch([("device", {})] + [("device", {name: _other(values)}) for name, values in tuned])
        if texts.digest("device", {}) is None:  # the build's own problem: its first build says it
            return
        for name, values in tuned:
            if not any(_changes(texts, side, name, values) for side in SIDES):
                raise MacroError(_refusal(spec, name, values))


_UNSPELLED = "__compileiq_unspelled_value__"  # a one-value macro's other value: none reads it alike


def _other(values: tuple[int | str, ...]) -> int | str:
    """The value a check compares the first with: the second, or one no code spells."""
    return values[1] if len(values) > 1 else _UNSPELLED


def _changes(texts: Preprocessed, side: str, name: str, values: tuple[int | str, ...]) -> bool:
    """Whether one of the macro's other values (one value: one no code spells) preprocesses to
    other code for `side` (a side the preprocessor fails at the defaults cannot say no)."""
    first = texts.digest(side, {})
    others: tuple[int | str, ...] = values[1:] or (_UNSPELLED,)
    return first is None or any(texts.digest(side, {name: value}) != first for value in others)


def _refusal(spec: KernelSpec, name: str, values: tuple[int | str, ...]) -> str:
    shown = ", ".join(str(v) for v in values)
    defined = [f for f in spec.nvcc_flags.flags if f.startswith("-D") and name in f.partition("=")[0]]
    defined += [f"-D{n}={v}" for n, v in spec.defines if name in n]
    hint = f" (the build's {', '.join(defined)} may take precedence)" if defined else ""
    said = (f"its values {shown} preprocess to the same device and host code" if len(values) > 1 else
            f"its one value {shown} preprocesses to the same device and host code as any other value would: "
             f"no code reads {name}")
    return (f"{spec.source.parent / 'tune.toml'}: tune.defines.{name}: {said}, so -D{name} has no effect{hint}: "
            "tune a macro the code reads, or take it out of [tune.defines]")


Macros = Mapping[str, int | str | None]  # tuned macros at other values than their first; None: no -D at all


class Preprocessed:
    """sha256 of the kernel preprocessed for one side with some macros changed, each run once;
    None where the preprocessor fails (a value the code rejects: not the same code)."""

    def __init__(self, spec: KernelSpec, nvcc: str, scratch: Path) -> None:
        self._spec, self._nvcc, self._scratch = spec, nvcc, scratch
        self._seen: dict[tuple[str, tuple[tuple[str, str | None], ...]], str | None] = {}

    def digest(self, side: str, macros: Macros) -> str | None:
        key = self._key(side, macros)
        if key not in self._seen:
            self._seen[key] = self._run(side, macros, len(self._seen))
        return self._seen[key]

    def prefetch(self, wanted: list[tuple[str, Macros]]) -> None:
        """Run these at once, as many at a time as there are CPUs (each run is one process)."""
        todo = {self._key(side, macros): (side, macros) for side, macros in wanted}
        todo = {key: job for key, job in todo.items() if key not in self._seen}
        first = len(self._seen)
        with ThreadPoolExecutor(max(1, min(len(todo), os.cpu_count() or 1))) as pool:
            runs = {key: pool.submit(self._run, side, macros, first + i)
                    for i, (key, (side, macros)) in enumerate(todo.items())}
        self._seen.update({key: run.result() for key, run in runs.items()})

    @staticmethod
    def _key(side: str, macros: Macros) -> tuple[str, tuple[tuple[str, str | None], ...]]:
        return side, tuple(sorted(((n, None if v is None else str(v)) for n, v in macros.items()), key=str))

    def _run(self, side: str, macros: Macros, number: int) -> str | None:
        out = self._scratch / f"{number}.ii"
        if not preprocess(self._spec, self._nvcc, macros, out, side=side):
            return None
        digest = hashlib.sha256()
        with out.open("rb") as text:
            while block := text.read(1 << 20):
                digest.update(block)
        out.unlink()
        return digest.hexdigest()


def preprocess(spec: KernelSpec, nvcc: str, macros: Macros, out: Path, source: str = "", side: str = "device") -> bool:
    """`nvcc -E` of the kernel (or `source`, a file that includes it) as its default build
    preprocesses it, for `side`, with `macros` changed (None: no -D), into `out`, run in the
    kernel's folder; whether it gave `out`."""
    argv = [nvcc, "-E", "-x", "cu", *SIDES[side], *preprocessor_args(spec, macros), "-o", str(out),
            source or spec.source.name]
    run = run_tool(argv, max(spec.compile_timeout_s, DEPENDENCY_TIMEOUT_S), cwd=str(spec.source.parent),
                   memory_bytes=COMPILER_MEMORY)
    return run.returncode == 0 and not run.timed_out and out.is_file()
