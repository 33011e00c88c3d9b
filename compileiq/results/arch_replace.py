"""Whether `flags`' arch words, appended to the command the ACF was tuned from, replace that
command's own: nvcc takes the last `-arch` and the last `-code` it is given (13.0: "incompatible
redefinition for option 'gpu-architecture', the last value of this option was used"), so the
`-arch=compute_90 -code=sm_120` of an ACF tuned from `--gpu-architecture=compute_90
--gpu-code=sm_90,sm_120` would build sm_120 alone. A `-gencode` adds an arch and is never replaced."""

from __future__ import annotations

import re

from compileiq.results.acf import Acf
from compileiq.source.shipped import arch_flag_archs

_KINDS = {"-arch": "-arch", "--gpu-architecture": "-arch", "-code": "-code", "--gpu-code": "-code"}


def _split(flag: str) -> tuple[str | None, str]:
    """(-arch or -code, its value) of an arch option as given (`-arch sm_90`, `--gpu-code=sm_90`); (None, "") else."""
    option, value = (*re.split(r"[= ]", flag.strip(), maxsplit=1), "")[:2]
    return _KINDS.get(option), value.strip()


def replaced_note(acf: Acf, fmt: str, stage: str, with_arch: bool) -> str | None:
    """One line for stderr where the arch words `flags` gives (args, optf, json's flags) would replace the arch
    options of the command the ACF records (`[[baseline.fixed]]`), and which archs that build loses."""
    if acf.shipped is None or not with_arch or fmt not in ("args", "optf", "json") or stage == "ptxas":
        return None
    printed = arch_words(acf, stage)
    ours = {kind: value for kind, value in map(_split, printed) if kind is not None}
    own = [fixed.flag for fixed in acf.shipped.fixed if _split(fixed.flag)[0] is not None]
    replaced = [flag for flag in own if (kind := _split(flag)[0]) in ours and ours[kind] != _split(flag)[1]]
    if not replaced:
        return None
    built = _machine_code(printed)
    lost = [arch for arch in _machine_code(tuple(own)) if arch not in built]
    loses = f", no {', '.join(lost)}" if lost else ""
    return (f"note: appended to your build's command ({acf.shipped.origin}), {' '.join(printed)} replaces its own "
            f"{' '.join(replaced)} (nvcc takes the last -arch and -code given), so it builds "
            f"{', '.join(built) or acf.arch} alone{loses}: keep the command's arch flags and append "
            f"`compileiq flags --no-arch` instead (the settings were checked on {acf.arch} only)")


def _machine_code(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The sm_XY archs arch options build: their -code list where they give one, else their -arch."""
    codes = tuple(flag for flag in flags if _split(flag)[0] == "-code") or flags
    return tuple(dict.fromkeys(arch for flag in codes for arch in arch_flag_archs(flag) or ()))


def arch_words(acf: Acf, stage: str = "all") -> tuple[str, ...]:
    """The arch flags `acf.flags(stage)` holds (what --no-arch leaves out)."""
    with_arch, without = acf.flags(stage), set(acf.flags(stage, with_arch=False))
    return tuple(token for token in with_arch if token not in without)
