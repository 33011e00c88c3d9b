"""What a user can do when the compiler defaults fail to build for a known reason: the tune.toml
line or option the failure asks for, appended to the baseline's one-line error."""

from __future__ import annotations

import json
import re
from pathlib import Path

from compileiq.build.compile import BuildStatus
from compileiq.core.text import printable
from compileiq.evaluate.metrics import NO_KERNEL
from compileiq.source.includers import in_folder
from compileiq.source.spec import KernelSpec, SourceBundle

# ptxas's words for a call into (or the address of) a __device__ function defined in another file
SEPARATE_COMPILATION = ("Unresolved extern function", "Cannot take address of function")
# ptxas on an instruction of the arch-specific feature set (sm_90a) compiled for the plain target
ARCH_SPECIFIC = re.compile(r"Instruction '([\w.:]+)' not supported on \.target '(sm_\d+)(a?)'")
# the first arch-specific target of an instruction family that one of its own arch lacks
FAMILY_ARCH = {"tcgen05": "sm_100a", "wgmma": "sm_90a", "setmaxnreg": "sm_90a"}
# the front end names the switch a construct needs: its words, and the switch as tune.toml takes it
FRONTEND_SWITCHES = (("'--expt-relaxed-constexpr' can be used", "--expt-relaxed-constexpr"),
                     ("requires --extended-lambda nvcc flag", "--extended-lambda"))
# a kernel template (``template <int BM, ...> __global__ void sgemm(...)``): no code until instantiated
# (specifiers before __global__ may carry arguments: ggml's __launch_bounds__(calc_nwarps(N)*32, 1) static)
KERNEL_TEMPLATE = re.compile(rb"template\s*<[^{};]*>\s*(?:[A-Za-z_]\w*(?:\s*\((?:[^()]|\([^()]*\))*\))?\s+)*__global__\b")


def build_hint(reason: str, bundle: SourceBundle, kernel: KernelSpec) -> str:
    """What the user can do when the defaults fail for a known reason ("" when none is known)."""
    if reason.startswith(f"{BuildStatus.TIMEOUT.value}:"):  # a Thrust/CUB-heavy file on a small machine
        return f" (a heavy build needs a larger compile_timeout_s in tune.toml: now {kernel.compile_timeout_s:g} s)"
    if target := ARCH_SPECIFIC.search(reason):  # wgmma: sm_90a code, not sm_90; tcgen05: sm_100a
        return arch_hint(target[1], target[2] + target[3])
    if switch := next((flag for words, flag in FRONTEND_SWITCHES if words in reason), None):
        flags = [*kernel.nvcc_flags.flags, switch]
        return f" (add it in tune.toml: nvcc_flags = {json.dumps(flags)})"
    if not bundle.relocatable and any(words in reason for words in SEPARATE_COMPILATION):
        return ' (a __device__ function from another file needs nvcc_flags = ["-rdc=true"] in tune.toml)'
    if NO_KERNEL in reason and any(KERNEL_TEMPLATE.search(content) for _, content in bundle.files):
        return (": its kernels are templates that nothing instantiates; tune the .cu that launches them, or a"
                " file that includes this one and instantiates them (template __global__ void NAME<...>(...);)")
    if reason.startswith(f"{BuildStatus.COMPILE_ERROR.value}:"):
        return included_hint(kernel.source)
    return ""


def included_hint(source: Path) -> str:
    """Where a file beside the kernel #includes it (a fragment such as Rodinia hotspot3D's opt1.cu,
    built inside 3D.cu after the headers 3D.cu includes first): which one, and what to do ("" if none)."""
    found = in_folder(source)
    if not found:
        return ""
    includer = printable(found[0].file.name)
    more = f" (and {len(found) - 1} other file(s))" if len(found) > 1 else ""
    return (f"; {includer}{more} #includes {printable(source.name)}, which may build only there, after what "
            f"{includer} includes first: tune {includer}, which holds its kernels (with --compile-commands, "
            f"{includer}'s command), or make {printable(source.name)} include what it uses "
            "(docs/ci.md, \"A compile command by hand\")")


def arch_hint(instruction: str, target: str) -> str:
    """The arch an arch-specific instruction needs, when it is not the target ptxas was given."""
    family = instruction.split(".")[0]
    wanted = FAMILY_ARCH.get(family) or (target if target.endswith("a") else f"{target}a")
    if wanted == target:
        return ""
    return f' (arch-specific instructions need --arch {wanted}, or arch = "{wanted}" in tune.toml)'
