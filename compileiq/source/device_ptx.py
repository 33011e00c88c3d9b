"""The device code (PTX) of a kernel's default build with some tuned macros changed, for a check
that must tell code that preprocesses to other text apart from code that compiles to other device
code: `nvcc -ptx` as `macro_effect.preprocess` runs `nvcc -E` (in the kernel's folder, its own file
name, so names of internal linkage hash alike), comment lines left out (they name the command and
files). None where it does not compile or runs past its time."""

from __future__ import annotations

from pathlib import Path

from compileiq.core.processes import COMPILER_MEMORY, run_tool
from compileiq.source.kernel import DEPENDENCY_TIMEOUT_S, preprocessor_args
from compileiq.source.macro_effect import Macros
from compileiq.source.spec import KernelSpec


def device_ptx(spec: KernelSpec, nvcc: str, macros: Macros, out: Path) -> bytes | None:
    """The PTX of `spec`'s kernel with `macros` (None: no -D for it), written to `out` on the way."""
    cuh = ("-x", "cu") if spec.source.suffix == ".cuh" else ()
    argv = [nvcc, "-ptx", *preprocessor_args(spec, macros), *cuh, spec.source.name, "-o", str(out)]
    run = run_tool(argv, max(spec.compile_timeout_s, DEPENDENCY_TIMEOUT_S), cwd=str(spec.source.parent),
                   memory_bytes=COMPILER_MEMORY)
    if run.returncode != 0 or run.timed_out or not out.is_file():
        return None
    lines = out.read_bytes().splitlines()
    return b"\n".join(line for line in lines if not line.lstrip().startswith(b"//"))
