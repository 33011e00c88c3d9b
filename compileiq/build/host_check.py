"""The shipped command's host options that may change the device code, checked instead of guessed.

nvcc preprocesses the device pass with the host compiler and its options, so a host optimisation
level (`nvcc -O3`) defines __OPTIMIZE__ there, and -Xcompiler -O2/-fopenmp may define theirs: a
kernel (or a header's inline code) that reads them compiles to other device code in the shipped
build than in one without them. Reading the command cannot tell (`compile_db` sets them aside as
"may change"); one front end with and without nvcc's own -O level can. Where the PTX is the same it
stays set aside, said as checked (the study keeps its identity); where it differs, it is applied as
a base flag of every build (the baseline, each variant, the ACF's `[base]`: the device code the
shipped build compiles). A host compiler option (-Xcompiler) is never handed to a check: a compile
database is untrusted, and a host compiler option can run a program (gcc's `-wrapper,PROG`,
`-fplugin=`, `-B`); those stay set aside on the command's reading. `tune` and the gate check
alike, so they read one command as the same base flags.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from compileiq.build.linkage import stable_ptx
from compileiq.core.processes import COMPILER_MEMORY, run_tool, scratch_dir
from compileiq.source import nvcc_argv
from compileiq.source.base_flags import host_level
from compileiq.source.kernel import preprocessor_args, with_base_flags
from compileiq.source.shipped import APPLIED_HOST, HOST_OPTIMISATION
from compileiq.source.spec import FixedFlag, KernelSpec

CHECK_TIMEOUT_S = 120.0
SAME = "the device code is the same without it (checked)"
DIFFERS = "changes {source}'s device code ({macro}): its PTX differs without it"


def _level(flag: FixedFlag) -> str | None:
    """The nvcc -O level a set-aside flag of the command is (`-O3`), or None for any other flag."""
    if flag.applied or flag.why != HOST_OPTIMISATION:
        return None
    try:
        words = shlex.split(flag.flag)
    except ValueError:
        return None
    level = next((value for name, value, _ in nvcc_argv.options(words) if name in ("-O", "--optimize")), None)
    return f"-O{level}" if level is not None and host_level(f"-O{level}") else None


def _ptx(spec: KernelSpec, nvcc: str, extra: tuple[str, ...]) -> bytes | None:
    """The kernel's default build's PTX with `extra`, its comment lines (they name the command and
    files) left out; None where it did not compile."""
    cuh = ("-x", "cu") if spec.source.suffix == ".cuh" else ()
    with scratch_dir("host-check") as workdir:
        out = Path(workdir) / "k.ptx"
        argv = [nvcc, "-ptx", *preprocessor_args(spec), *cuh, *extra, spec.source.name, "-o", str(out)]
        run = run_tool(argv, max(spec.compile_timeout_s, CHECK_TIMEOUT_S), cwd=str(spec.source.parent),
                       memory_bytes=COMPILER_MEMORY)
        if run.timed_out or run.returncode != 0 or not out.is_file():
            return None
        lines = stable_ptx(out.read_bytes()).splitlines()
    return b"\n".join(line for line in lines if not line.lstrip().startswith(b"//"))


def checked(spec: KernelSpec, nvcc: str) -> KernelSpec:
    """`spec` (with its shipped build) after its front end with and without the command's nvcc -O
    level: the same PTX keeps it set aside (said as checked); another applies it as a base flag.
    Unchecked (a compile failed) leaves it as the command's reading said."""
    shipped = spec.shipped
    if shipped is None:
        return spec
    found = {f: level for f in shipped.fixed if (level := _level(f)) is not None}
    if not found:
        return spec
    level = list(found.values())[-1]  # nvcc takes the last -O
    without, with_level = _ptx(spec, nvcc, ()), _ptx(spec, nvcc, (level,))
    if without is None or with_level is None:
        return spec
    name, changes = spec.source.name, without != with_level
    what = HOST_OPTIMISATION.partition(": may change")[0]

    def relabel(flag: FixedFlag) -> FixedFlag:
        if flag not in found:
            return flag
        if not changes:
            return replace(flag, why=flag.why.replace(HOST_OPTIMISATION, f"{what}: {SAME}"))
        return FixedFlag(flag.flag, True, f"{what}{APPLIED_HOST}{DIFFERS.format(source=name, macro='__OPTIMIZE__')}")

    spec = replace(spec, shipped=replace(shipped, fixed=tuple(relabel(f) for f in shipped.fixed)))
    return with_base_flags(spec, (level,), f"{shipped.origin}: the command for {name}") if changes else spec
