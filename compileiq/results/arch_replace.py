"""What `flags`' arch words do appended to the command the ACF was tuned from, read as nvcc 13.0
reads a command's arch flags together (`arch_model`, checked with nvcc --dryrun): the last -arch
wins, every -code is kept, and each -gencode adds its own pair. So `-arch=compute_80 -code=sm_90`
appended to `-arch=compute_80 -code=sm_80,sm_90` still builds sm_80 and sm_90 (sm_80 unchecked),
while `-arch=sm_90` appended to `--gpu-architecture=compute_90 --gpu-code=sm_90,compute_90` would
stop nvcc ("must be a virtual code architecture"): `broken` names words that would, and `flags`
refuses to print them; `replaced_note` says what the words that work build."""

from __future__ import annotations

import re

from compileiq.results.acf import Acf
from compileiq.source import arch_model
from compileiq.source.arch_code import gencode, incompatible, refused
from compileiq.source.shipped import arch_flag_archs

_CODE = re.compile(r"(?:sm|compute|lto)_[0-9]+[a-z]?")
_RULE = "nvcc keeps the last -arch and builds every -code given"


def _appended(acf: Acf, fmt: str, stage: str, with_arch: bool) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(the command's own arch flags, in its order; the arch words `flags` prints), where both hold some."""
    if acf.shipped is None or not with_arch or fmt not in ("args", "optf", "json") or stage == "ptxas":
        return None
    own = tuple(fixed.flag for fixed in acf.shipped.fixed if arch_flag_archs(fixed.flag) is not None)
    if refused(own) or not all(_CODE.fullmatch(code) for code in arch_model.read(own).codes):
        return None  # flags no nvcc takes ([baseline] edited by hand): nothing to say what they build with
    printed = arch_words(acf, stage)
    return (own, printed) if own and printed else None


def _built(flags: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """What the arch flags embed, as `arch_model.ArchFlags.built` says, each -gencode's pairs added."""
    pairs = [(code, f"compute_{found[0]}") for flag in flags if (found := gencode(flag.strip())) is not None
             for code in found[1]]
    return tuple(dict.fromkeys((*arch_model.read(flags).built(), *pairs)))


def broken(acf: Acf, fmt: str, stage: str, with_arch: bool) -> str | None:
    """One line where the arch words `flags` gives (args, optf, json), appended to the command the ACF
    records, make arch flags nvcc refuses: the build would stop, so they are not printed."""
    if (found := _appended(acf, fmt, stage, with_arch)) is None:
        return None
    own, printed = found
    combined = (*own, *printed)
    pair = incompatible(combined)
    why = refused(combined) or (f"arch={pair[0]} paired with code={pair[1]} (nvcc: \"Incompatible code generation "
                                "requested\")" if pair is not None else None)
    if why is None:
        return None
    assert acf.shipped is not None
    return (f"appended to your build's command ({acf.shipped.origin}), the arch words {' '.join(printed)} would leave "
            f"its arch flags holding {why} ({_RULE}), so nvcc would build nothing: keep the command's arch flags "
            f"and append `compileiq flags --no-arch` (the command builds {arch_model.names(_built(own))}; the "
            f"settings were checked on {acf.arch} only)")


def replaced_note(acf: Acf, fmt: str, stage: str, with_arch: bool) -> str | None:
    """One line for stderr where the arch words `flags` gives (args, optf, json) override the -arch of the
    command the ACF records (`[[baseline.fixed]]`), or change what it builds: what nvcc then builds."""
    if (found := _appended(acf, fmt, stage, with_arch)) is None or broken(acf, fmt, stage, with_arch):
        return None
    own, printed = found
    before, after = _built(own), _built((*own, *printed))
    arch = arch_model.read(own).arch
    others = [made for made, _ in after if made.startswith("sm_") and made != acf.arch]  # machine code: ptxas runs
    same = set(before) == set(after)  # nvcc embeds a set: the order the flags name them in changes nothing
    if same and (arch is None or (arch == arch_model.read(printed).arch and not others)):
        return None
    assert acf.shipped is not None
    start = f"note: appended to your build's command ({acf.shipped.origin}), {' '.join(printed)}"
    if same:
        unchecked = f": {', '.join(others)} {'gets' if len(others) == 1 else 'get'} them unchecked" if others else ""
        kept = "kept" if arch == arch_model.read(printed).arch else "overridden"
        return (f"{start} builds what the command builds, {arch_model.names(after)} ({_RULE}; its -arch={arch} "
                f"{kept}): the settings were checked on {acf.arch} only{unchecked}")
    lost, added = [b for b in before if b not in after], [a for a in after if a not in before]
    change = "; ".join(([f"no {arch_model.names(lost)}"] if lost else [])
                       + ([f"{arch_model.names(added)} added"] if added else []))
    return (f"{start} makes it build {arch_model.names(after)} where it builds {arch_model.names(before)} ({_RULE}): "
            f"{change}; keep the command's arch flags and append `compileiq flags --no-arch` instead (the settings "
            f"were checked on {acf.arch} only)")


def arch_words(acf: Acf, stage: str = "all") -> tuple[str, ...]:
    """The arch flags `acf.flags(stage)` holds (what --no-arch leaves out)."""
    with_arch, without = acf.flags(stage), set(acf.flags(stage, with_arch=False))
    return tuple(token for token in with_arch if token not in without)
