"""The shipped command's host options that may change the device code, checked instead of guessed.

nvcc preprocesses the device pass with the host compiler and its options, so a host optimisation
level (`nvcc -O3`) defines __OPTIMIZE__ there, and -Xcompiler -O2/-fopenmp may define theirs: a
kernel (or a header's inline code) that reads them compiles to other device code in the shipped
build than in one without them. Reading the command cannot tell (`compile_db` sets them aside as
"may change"); one front end with and without them can. Where the PTX is the same they stay set
aside, said as checked (the study keeps its identity); where it differs, nvcc's own -O level is
applied as a base flag of every build (the baseline, each variant, the ACF's `[base]`: the device
code the shipped build compiles), and any other such host option is said to change the device code,
which compileiq cannot give its builds (a host compiler option is no base flag: nvcc hands it to
/bin/sh). `tune` and the gate check alike, so they read one command as the same base flags.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from compileiq.build.compile import unsafe_nvcc_args
from compileiq.build.linkage import stable_ptx
from compileiq.core.processes import COMPILER_MEMORY, run_tool, scratch_dir
from compileiq.source import nvcc_argv
from compileiq.source.base_flags import host_level
from compileiq.source.kernel import preprocessor_args, with_base_flags
from compileiq.source.preprocessor import MAY_CHANGE_MACROS
from compileiq.source.shipped import APPLIED_HOST, HOST_OPTIMISATION
from compileiq.source.spec import FixedFlag, KernelSpec

CHECK_TIMEOUT_S = 120.0
SAME = "the device code is the same without it (checked)"
DIFFERS = "changes {source}'s device code ({macro}): its PTX differs without it"


def _candidate(flag: FixedFlag) -> bool:
    return not flag.applied and (flag.why == HOST_OPTIMISATION or MAY_CHANGE_MACROS in flag.why)


def _args(flag: FixedFlag) -> tuple[str, ...] | None:
    """The nvcc arguments a set-aside flag is (as the command gave it), or None where compileiq
    will not hand them to nvcc (`unsafe_nvcc_args`)."""
    try:
        words = shlex.split(flag.flag)
    except ValueError:
        return None
    if flag.why == HOST_OPTIMISATION:
        level = next((value for name, value, _ in nvcc_argv.options(words) if name in ("-O", "--optimize")), None)
        return (f"-O{level}",) if level is not None and host_level(f"-O{level}") else None
    host = len(words) == 2 and words[0] in ("-Xcompiler", "--compiler-options")
    args = (f"-Xcompiler={words[1]}",) if host else tuple(words)
    return None if unsafe_nvcc_args(args) else args


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
    """`spec` (with its shipped build) after its front end with and without the set-aside host
    options that may change the device code (once more with nvcc's -O alone where both it and host
    compiler options are set aside and the PTX differs): the same PTX keeps them set aside (said as checked);
    another applies nvcc's -O level as a base flag. Unchecked (a compile failed, an option compileiq
    will not run) leaves them as the command's reading said."""
    shipped = spec.shipped
    if shipped is None:
        return spec
    found = [(f, args) for f in shipped.fixed if _candidate(f) and (args := _args(f)) is not None]
    if not found:
        return spec
    levels = tuple(args[0] for f, args in found if f.why == HOST_OPTIMISATION)
    others = tuple(a for f, args in found if f.why != HOST_OPTIMISATION for a in args)
    without, with_all = _ptx(spec, nvcc, ()), _ptx(spec, nvcc, (*levels, *others))
    # both kinds and another PTX: one more front end, so that each kind is said as it is
    with_levels = _ptx(spec, nvcc, levels) if levels and others and without != with_all else None
    if without is None or with_all is None or (levels and others and without != with_all and with_levels is None):
        return spec
    if with_levels is None:
        changes = {HOST_OPTIMISATION: without != with_all, MAY_CHANGE_MACROS: without != with_all}
    else:
        changes = {HOST_OPTIMISATION: with_levels != without, MAY_CHANGE_MACROS: with_levels != with_all}

    def relabel(flag: FixedFlag) -> FixedFlag:
        if flag not in dict(found):
            return flag
        said = HOST_OPTIMISATION if flag.why == HOST_OPTIMISATION else MAY_CHANGE_MACROS
        what = said.partition(": may change")[0]
        if not changes[said]:
            return replace(flag, why=flag.why.replace(said, f"{what}: {SAME}"))
        if said == HOST_OPTIMISATION:
            return FixedFlag(flag.flag, True, f"{what}{APPLIED_HOST}{DIFFERS.format(source=name, macro='__OPTIMIZE__')}")
        differs = DIFFERS.format(source=name, macro="the macros it predefines")
        return replace(flag, why=flag.why.replace(said, f"{what}: {differs}; compileiq cannot give its builds a host "
                                                  "compiler option: the baseline is not the build that ships"))

    name = spec.source.name
    applied = levels[-1:] if changes[HOST_OPTIMISATION] else ()  # nvcc takes the last -O
    spec = replace(spec, shipped=replace(shipped, fixed=tuple(relabel(f) for f in shipped.fixed)))
    return with_base_flags(spec, applied, f"{shipped.origin}: the command for {name}") if applied else spec
