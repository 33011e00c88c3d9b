"""How nvcc 13.0 reads a command's arch flags together, checked with `nvcc --dryrun` (its cicc,
ptxas and fatbinary steps): the last -arch/--gpu-architecture wins (`-arch=sm_80 -arch=sm_90` builds
sm_90 alone; an earlier one is checked against nothing), every -code/--gpu-code value is kept, a
comma list or a repeated flag alike (`-arch=compute_80 -code=sm_80 -code=sm_90` builds both from
compute_80 PTX), and each -gencode adds its own pair beside them. -arch=sm_XY with no -code is
machine code and PTX of its own arch; -arch=compute_XY with none, PTX alone; an arch-specific or
family one (sm_90a, compute_100f) adds its plain arch's PTX (compute_90); all, all-major and
native name sets of archs. The text comes from untrusted commands and ACFs: read, never echoed."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

ARCH_OPTIONS = ("-arch", "--gpu-architecture")
CODE_OPTIONS = ("-code", "--gpu-code")
GENCODE_OPTIONS = ("-gencode", "--generate-code")
SETS = ("all", "all-major", "native")
_NUMBER = re.compile(r"[0-9]+[a-z]?")


def option(given: str) -> tuple[str, str]:
    """(the option, its value) of a flag as given: `-arch=sm_90`, `--gpu-code sm_90,sm_80`."""
    name, _, value = given.strip().partition(" ") if " " in given.strip().partition("=")[0] else \
        given.strip().partition("=")
    return name, value.strip()


@dataclass(frozen=True)
class ArchFlags:
    """A command's -arch and -code flags read together, as nvcc reads them."""

    arch: str | None  # the last -arch value: the one nvcc keeps
    codes: tuple[str, ...]  # every -code value, each once, in order
    overridden: tuple[str, ...]  # the earlier -arch flags, as given: nvcc drops them

    @property
    def virtual(self) -> str | None:
        """XY of the last -arch=compute_XY, else None."""
        return self.arch.removeprefix("compute_") if self.arch and self.arch.startswith("compute_") else None

    def built(self) -> tuple[tuple[str, str], ...]:
        """What they embed, as (sm_XY or compute_XY, the compute_VW it is made from), where nvcc takes
        them (`arch_code.refused` and `incompatible` name the rest); an arch set: (word, word)."""
        if self.arch is None:
            return ()
        if self.arch in SETS:
            return ((self.arch, self.arch),)
        number = self.arch.partition("_")[2]
        if self.codes:
            return tuple((code, f"compute_{number}") for code in self.codes)
        # an arch-specific or family arch (sm_90a, sm_100f) with no -code embeds its plain PTX too
        plain = number.rstrip("abcdefghijklmnopqrstuvwxyz")
        family = ((f"compute_{plain}", f"compute_{plain}"),) if plain != number else ()
        if self.virtual is not None:
            return ((self.arch, self.arch), *family)
        return ((f"sm_{number}", f"compute_{number}"), (f"compute_{number}", f"compute_{number}"), *family)


def read(flags: Iterable[str]) -> ArchFlags:
    """The -arch and -code flags among `flags` (any others are passed over), read as nvcc does."""
    archs: list[tuple[str, str]] = []
    codes: list[str] = []
    for given in flags:
        name, value = option(given)
        if name in ARCH_OPTIONS:
            archs.append((given, value))
        elif name in CODE_OPTIONS:
            codes += [code for code in value.split(",") if code]
    return ArchFlags(archs[-1][1] if archs else None, tuple(dict.fromkeys(codes)),
                     tuple(given for given, _ in archs[:-1]))


def builds(flags: Iterable[str]) -> tuple[bool, ...]:
    """For each of `flags`, in order, whether it builds something: False for an earlier -arch a later
    one overrides, by position (`-arch=sm_90 ... -arch=sm_90`: the first builds nothing, the last does)."""
    flags = list(flags)
    overridden = list(read(flags).overridden)
    found = []
    for flag in flags:
        found.append(flag not in overridden)
        if flag in overridden:
            overridden.remove(flag)  # one occurrence each, the earliest first
    return tuple(found)


def names(built: Iterable[tuple[str, str]]) -> str:
    """`sm_90 (from compute_80 PTX), compute_90 PTX`: what `ArchFlags.built` and -gencode pairs embed."""
    said = []
    for made, source in dict.fromkeys(built):
        if made in SETS:
            said.append(f"-arch={made}'s archs")
        elif made.startswith("compute_"):
            said.append(f"{made} PTX")
        elif source.removeprefix("compute_") == made.removeprefix("sm_"):
            said.append(made)
        else:
            said.append(f"{made} (from {source} PTX)")
    return ", ".join(said) or "nothing"
