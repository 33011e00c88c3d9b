"""What a shipped command's arch flags for the arch tuned put in the fat binary, and how `flags`
builds the same: machine code alone (`-gencode arch=compute_80,code=sm_80`), PTX alone
(`-arch=compute_80`: the driver compiles it when it loads, with its own settings, so ptxas settings
cannot apply to it), or machine code made from an older arch's PTX (`-arch=compute_80 -code=sm_86`:
sm_86 code and nothing for sm_80). nvcc -dryrun shows each (its fatbinary's image3=kind=elf/ptx).
A `-gencode` is read as nvcc 13.0 reads it (`gencode`): `code="sm_90,compute_80"` is the list
`code=[sm_90,compute_80]`, and flags nvcc refuses (`-arch=compute_100 -code=sm_90`) are named (`incompatible`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from compileiq.source import arch_model

_GENCODE_OPTIONS = ("-gencode", "--generate-code")
# [0-9], never \d: Python's \d takes any Unicode digit (compute_９０), which nvcc refuses
_SOURCE = re.compile(r"compute_([0-9]+[a-z]?)")
_CODE = re.compile(r"(?:sm|compute|lto)_[0-9]+[a-z]?")
_NUMBER = re.compile(r"[0-9]+")
_VIRTUAL = re.compile(r"(?:-arch|--gpu-architecture)[= ]((?:sm|compute)_[0-9]+[a-z]?)")  # -arch=compute_80
_ARCH_VALUE = re.compile(r"(?:sm|compute|lto)_[0-9]+[a-z]?|all|all-major|native")  # one arch per -arch
_ARCH_OPTIONS = ("-arch", "--gpu-architecture")
_CODE_OPTIONS = ("-code", "--gpu-code")


def gencode(text: str) -> tuple[str, tuple[str, ...]] | None:
    """(XY of arch=compute_XY, the code= list) of a -gencode value, or of the flag as given
    (`-gencode=V`, `--generate-code V`), read as nvcc 13.0 reads it (checked with nvcc -dryrun):
    items split at commas outside double quotes and an unquoted [...], the quotes then dropped, so
    `code="sm_90,compute_80"`, `code=["sm_90",compute_80]` and `"code=sm_90,compute_80"` are all
    `code=[sm_90,compute_80]`; `arch=` and `code=` once each, in either order. None for anything
    else: another flag, or one nvcc refuses (a stray quote, `code=sm_90,compute_80` unbracketed,
    `code="[sm_90]"`, `code=" sm_90"`)."""
    text = text.strip()
    option = next((o for o in _GENCODE_OPTIONS if text.startswith((f"{o}=", f"{o} "))), None)
    value = text[len(option) + 1:] if option is not None else text
    items: list[list[tuple[str, bool]]] = [[]]  # each item's characters, and whether each was quoted
    quoted, depth = False, 0
    for c in value:
        if c == '"':
            quoted = not quoted
        elif c == "," and not quoted and depth == 0:
            items.append([])
        else:
            depth += (c == "[") - (c == "]") if not quoted else 0
            items[-1].append((c, quoted))
    if quoted or depth:
        return None
    read: dict[str, list[str]] = {}
    for item in items:
        keyword = "".join(c for c, _ in item).partition("=")[0]
        listed = item[len(keyword) + 1:]
        if keyword in read or keyword not in ("arch", "code") or len(listed) == len(item) - len(keyword):
            return None
        if len(listed) > 1 and listed[0] == ("[", False) and listed[-1] == ("]", False):
            listed = listed[1:-1]
        read[keyword] = "".join(c for c, _ in listed).split(",")
    codes, arch = read.get("code", []), read.get("arch", [])
    if len(arch) != 1 or not (source := _SOURCE.fullmatch(arch[0])) or not codes:
        return None
    return (source[1], tuple(codes)) if all(_CODE.fullmatch(code) for code in codes) else None


def canonical(text: str) -> str:
    """A -gencode value (or flag as given) as `arch=compute_XY,code=[...]` where `gencode` reads
    it, so that a quoted code list is read as its plain spelling; any other text as it is."""
    found = gencode(text)
    return f"arch=compute_{found[0]},code=[{','.join(found[1])}]" if found is not None else text


def incompatible(flags: Iterable[str]) -> tuple[str, str] | None:
    """(arch, code) of a pair nvcc refuses ("Incompatible code generation requested"): machine code
    older than the PTX it would be made from (`-arch=compute_100 -code=sm_90`), or PTX of another
    arch (`-gencode arch=compute_90,code=compute_80`); None where there is none. Read as nvcc
    reads them: a -gencode's own pair, and the last -arch=compute_XY with every -code (an earlier
    -arch is dropped unchecked: `arch_model`)."""
    flags = list(flags)
    pairs = [(found[0], code) for text in flags if (found := gencode(text.strip())) is not None for code in found[1]]
    read = arch_model.read(flags)
    if read.virtual is not None:
        pairs += [(read.virtual, code) for code in read.codes if _CODE.fullmatch(code)]
    for source, made in pairs:
        number, wanted = int(_NUMBER.findall(made)[0]), int(_NUMBER.findall(source)[0])
        if number < wanted or (made.startswith("compute_") and number != wanted):
            return f"compute_{source}", made
    return None


def refused(flags: Iterable[str]) -> str | None:
    """Why nvcc 13.0 refuses the arch flags as given (checked with nvcc -dryrun), or None: an -arch
    value that is no one arch (`-arch sm_90,sm_80`: "Unsupported gpu architecture"), a -code beside
    a last -arch that names machine code or a set (`-arch=sm_90 -code=sm_90`: "must be a virtual code
    architecture"), or a -code without any -arch ("-arch option not specified"). Never echoes them."""
    archs: list[str] = []
    code = False
    for given in flags:
        option = next((o for o in (*_ARCH_OPTIONS, *_CODE_OPTIONS) if given.startswith((f"{o}=", f"{o} "))), None)
        if option in _ARCH_OPTIONS:
            archs.append(given[len(option) + 1:])
        code = code or option in _CODE_OPTIONS
    if any(not _ARCH_VALUE.fullmatch(value) for value in archs):
        return ("an -arch value that is no gpu architecture nvcc takes (nvcc: \"Unsupported gpu architecture\"): one "
                "arch per -arch (sm_XY, compute_XY, all, all-major or native); several by -gencode or -code")
    if code and not archs:
        return "a -code without -arch (nvcc: \"-arch option not specified\")"
    if code and (archs[-1].startswith("sm_") or archs[-1] in ("all", "all-major", "native")):  # lto_XY: taken
        return ("a -code beside -arch=sm_XY or a set of archs (nvcc: \"Value of -arch option must be a virtual code "
                "architecture\"): -code takes -arch=compute_XY, the PTX its machine code is made from")
    return None


@dataclass(frozen=True)
class ShippedCode:
    """What the shipped arch flags embed for the arch tuned (sm_`number`): machine code for it
    (`machine`), its PTX (`ptx`), and the virtual arch either is compiled from (`source`)."""

    number: str
    source: str  # the XY of compute_XY the front end compiles for
    machine: bool
    ptx: bool
    coded: bool = False  # said with -arch=compute_XY -code=...: -arch=sm_XY appended to such a command stops nvcc

    @property
    def ptx_only(self) -> bool:
        return self.ptx and not self.machine

    @property
    def from_older_ptx(self) -> bool:
        """sm_86 machine code made from compute_80 PTX: -arch=sm_86 would make it from compute_86."""
        return self.machine and self.source != self.number

    def args(self, machine_code: bool = False) -> tuple[str, ...] | None:
        """The nvcc arguments that build it, in plain words, where -arch=sm_XY (machine code and
        its own PTX) would not; `machine_code`: a PTX-only build with sm_XY machine code added (the
        PTX kept: -code=sm_XY -code=compute_XY), which ptxas settings need to take effect. None: -arch=sm_XY builds it alike."""
        n, v = self.number, self.source
        if self.ptx_only:
            # two -code words, which nvcc reads as the list -code=sm_XY,compute_XY: a comma is no plain word
            return (f"-arch=compute_{n}", f"-code=sm_{n}", f"-code=compute_{n}") if machine_code else (f"-arch=compute_{n}",)
        if self.ptx and self.coded:  # -arch=sm_XY builds it alike, but nvcc refuses it after a -code
            return (f"-arch=compute_{n}", f"-code=sm_{n}", f"-code=compute_{n}")
        if self.ptx:  # machine code and PTX of its own arch: -arch=sm_XY itself
            return None
        return (f"-arch=compute_{v}", f"-code=sm_{n}")


def shipped_code(flags: Iterable[str], arch: str) -> ShippedCode | None:
    """What the command's arch flags for `arch` (those recorded as building it) embed for it,
    whether they say so in one `-gencode` or in `-arch=compute_XY -code=...` (nvcc's long forms and
    -code lists alike; nvcc embeds the union of what each names). Read from the numbers they name,
    never echoed: the text comes from an untrusted ACF. None when they are not such flags, name
    another arch's code or PTX, or nvcc would refuse them."""
    number = arch.removeprefix("sm_")
    sources: set[str] = set()
    codes: set[str] = set()
    flags = list(flags)
    for given in flags:
        if (found := gencode(given.strip())) is not None:
            sources.add(found[0])
            codes.update(found[1])
    read = arch_model.read(flags)  # the last -arch, every -code
    virtual = {read.arch} if read.arch is not None and _VIRTUAL.fullmatch(f"-arch={read.arch}") else set()
    listed = set(read.codes)
    if (listed and not virtual) or (read.arch is not None and not virtual):
        return None  # nvcc refuses a -code without -arch; an arch set is no one arch
    for value in virtual:
        kind, _, named_number = value.partition("_")
        if listed and kind != "compute":
            return None  # -arch=sm_XY with -code (nvcc: "must be a virtual code architecture")
        sources.add(named_number)
        codes.update(listed or ({value} if kind == "compute" else {f"sm_{named_number}", f"compute_{named_number}"}))
    if len(sources) != 1:
        return None
    (source,) = sources
    machine, ptx = f"sm_{number}" in codes, f"compute_{source}" in codes
    if codes - {f"sm_{number}", f"compute_{source}"} or (ptx and source != number) or not (machine or ptx):
        return None  # another arch's code, or another arch's PTX embedded beside it
    return ShippedCode(number, source, machine, ptx, coded=bool(listed))


def ptx_arch(flags: Iterable[str], arch: str) -> str:
    """The arch the front end compiles PTX for, for `arch`'s machine code: the compute_XY the
    command's arch flags make it from where that is older (`-arch=compute_80 -code=sm_86`, or
    `-code=sm_80,sm_86` beside it: compute_80, its __CUDA_ARCH__ 800), else `arch` itself
    (-arch=sm_86 -ptx: compute_86). Trials, the baseline and the gate's rebuild all compile so;
    ptxas still targets `arch`. Read from the numbers the flags name, never echoed."""
    number = arch.removeprefix("sm_")
    flags = list(flags)
    sources = {found[0] for text in flags if (found := gencode(text.strip())) is not None and f"sm_{number}" in found[1]}
    read = arch_model.read(flags)  # the last -arch, every -code
    if read.virtual is not None and f"sm_{number}" in read.codes:
        sources.add(read.virtual)
    if len(sources) != 1 or (source := next(iter(sources))) == number:
        return arch  # none, its own, or more than one (nvcc refuses two sources for one arch)
    return f"compute_{source}"


def arch_args(flags: Iterable[str], arch: str, machine_code: bool = False) -> tuple[str, ...] | None:
    """`shipped_code(flags, arch).args(machine_code)`: the arguments that build `arch` as the
    shipped command does where -arch=`arch` would not (None: it builds it alike, or they are not
    such flags)."""
    found = shipped_code(flags, arch)
    return found.args(machine_code) if found is not None else None


def paired(arch_flags: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    """Each arch flag as given with the archs it builds for, read together: beside a -code flag,
    `-arch=compute_80` only names the PTX the -code machine code is made from, so it builds what
    the -code flags build (`-arch=compute_80 -code=sm_86` builds sm_86, nothing for sm_80); an -arch
    a later one overrides builds nothing (nvcc keeps the last: `arch_model`)."""
    options = [arch_model.option(given)[0] for given, _ in arch_flags]
    last = max((i for i, name in enumerate(options) if name in _ARCH_OPTIONS), default=-1)
    codes = [archs for (_, archs), name in zip(arch_flags, options, strict=True) if name in _CODE_OPTIONS]
    built = tuple(dict.fromkeys(a for archs in codes for a in archs))
    return [(given, () if name in _ARCH_OPTIONS and i != last else built if codes and name in _ARCH_OPTIONS
             and "compute_" in given else archs) for i, ((given, archs), name) in enumerate(zip(arch_flags, options, strict=True))]


def code_note(flags: Iterable[str], arch: str) -> str | None:
    """The line `tune` and `space` print where the command's flags for the arch tuned build other
    than -arch=sm_XY: PTX only (ptxas settings cannot apply to it), or machine code from an older
    arch's PTX (the trials are compiled from that PTX too, as the shipped build is)."""
    found = shipped_code(flags, arch)
    if found is None:
        return None
    n, v = found.number, found.source
    if found.ptx_only:
        return (f"the compile command embeds compute_{n} PTX only, no sm_{n} machine code: ptxas never runs in that "
                "build (the driver compiles the PTX when it loads, with its own settings), so the ptxas settings "
                f"tuned here take effect only where sm_{n} machine code is embedded: `compileiq flags` gives "
                f"-arch=compute_{n} -code=sm_{n} -code=compute_{n} for a choice that holds any, else -arch=compute_{n}")
    if found.from_older_ptx:
        return (f"the compile command builds sm_{n} machine code from compute_{v} PTX (and nothing for sm_{v}): tuned "
                f"for sm_{n}, its trials compiled as it does, from compute_{v} PTX (its __CUDA_ARCH__); `compileiq "
                f"flags` keeps -arch=compute_{v} -code=sm_{n}")
    return None


def older_ptx_note(arch: str, ptx: str) -> str | None:
    """The line for machine code made from older PTX by flags that build other archs too
    (`-arch=compute_80 -code=sm_80,sm_86`, sm_80 left out: `shipped.arch_note` says so)."""
    if ptx == arch:
        return None
    return (f"the compile command builds {arch} machine code from {ptx} PTX: its trials compiled so; "
            f"`compileiq flags` gives -arch={ptx} -code={arch}")


PTX_ONLY = ("PTX for {ptx} (JIT-compiled by the driver on GPUs without their own code: ptxas settings do not "
            "reach it)")


def ptx_only_archs(flags: Iterable[str]) -> tuple[str, ...]:
    """sm_XY of each arch the arch flags, read together, embed PTX for and no machine code (CMake's
    `80-virtual`: `-gencode arch=compute_80,code=[compute_80]`, or `-arch=compute_80` alone): ptxas
    never runs for it at build time; the driver JIT-compiles the PTX on GPUs without code of their
    own. Read from the numbers the flags name, never echoed; in the order first named."""
    flags = list(flags)
    codes = [code for text in flags if (found := gencode(text.strip())) is not None for code in found[1]]
    # the last -arch with every -code (beside -code, -arch=compute_XY names only the PTX they are made from)
    codes += [made for made, _ in arch_model.read(flags).built()]
    machine = {c.removeprefix("sm_") for c in codes if c.startswith("sm_")}
    ptx = [c.removeprefix("compute_") for c in codes if c.startswith("compute_")]
    return tuple(dict.fromkeys(f"sm_{n}" for n in ptx if n not in machine))


def ptx_names(archs: Iterable[str]) -> str:
    """compute_80, compute_75 for sm_80, sm_75."""
    return ", ".join(f"compute_{a.removeprefix('sm_')}" for a in archs)
