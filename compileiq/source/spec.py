"""The kernel spec (a .cu file plus its optional tune.toml) and the source bundle shipped to workers:
the types every later stage reads. Loading them is `kernel` (files) and `kernel_toml` (settings).

A tuned define's first listed value is its default: the baseline configuration uses it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from compileiq.core import implied
from compileiq.core.errors import UsageError
from compileiq.core.space import Value
from compileiq.source.arch_code import ptx_arch
from compileiq.source.base_flags import SYSTEM, BaseFlags, path_problem, ptxas_cap_args

TUNE_FILE = "tune.toml"
DEFAULT_BLOCK_SIZE = 256
MAX_TIMEOUT_S = 86400  # a day: also refuses inf and nan
Values = tuple[int | str, ...]
MODES = ("harness", "program")  # how a timed run reports its time (`mode` in tune.toml)
MAX_METRIC_REGEX = 500  # characters: a pattern for one timing line


def metric_regex_problem(text: object) -> str:
    """What is wrong with a program mode's metric regex ("" if nothing): it must compile and have a
    group around the time in ms (tune.toml's `metric_regex`, `--metric-regex`, an ACF's record)."""
    if not isinstance(text, str) or len(text) > MAX_METRIC_REGEX:
        return f"must be a regular expression of at most {MAX_METRIC_REGEX} characters"
    try:
        groups = re.compile(text).groups
    except re.error as error:
        return f"not a regular expression: {error}"
    return "" if groups >= 1 else "needs a group around the time in ms, e.g. 'time: ([0-9.]+) ms'"


class KernelError(UsageError):
    """A kernel file or its tune.toml is missing or invalid."""


@dataclass(frozen=True)
class LaunchFacts:
    """How one entry is launched: threads per block and dynamic shared memory, each an integer
    or an arithmetic expression over macros (``2*BLOCK*sizeof(float)``)."""

    entry: str
    block_size: str | None = None
    dynamic_smem: str | None = None


@dataclass(frozen=True)
class ShippedSetting:
    """One searched setting of the build a project ships, as its compile command spells it."""

    name: str  # the search-space parameter, e.g. "nvcc.use_fast_math"
    value: Value  # its value in the shipped build (one of the parameter's values)
    flag: str  # as given, e.g. "--use_fast_math" or "-Xptxas -O3": what to remove from the command
    part: str = field(default="", compare=False)  # its option alone where `flag` holds several ("-Xptxas -O3,-v": "-Xptxas -O3")


@dataclass(frozen=True)
class FixedFlag:
    """A flag of the shipped command that is not searched: applied to every build as it is (an
    allow-listed base flag), or not applied, with the reason."""

    flag: str
    applied: bool
    why: str


SHIPPED = "your build as shipped"  # what refusals call a shipped build's baseline (`eligibility.against`)


@dataclass(frozen=True)
class ShippedBuild:
    """The build a project ships (its compile command in compile_commands.json): the tuning
    baseline is the compiler defaults overridden by `settings`."""

    origin: str  # the compilation database's file name, for labels ("compile_commands.json")
    settings: tuple[ShippedSetting, ...] = ()
    fixed: tuple[FixedFlag, ...] = ()
    source: str = "compile_commands"
    path: str = ""  # the compilation database (tune: as found; an ACF: relative to the ACF's folder, "" if not recorded)
    output: str = ""  # the command's `output` in the database (what --compile-output names); "" if not recorded
    others: tuple[str, ...] = ()  # the outputs of the database's other commands for the same file
    default_arch: str = ""  # the command names no arch: nvcc's default, which it builds (tune only; "" otherwise)

    @property
    def name(self) -> str:
        """What the baseline is called where it is this build (even one that sets no searched
        setting: its fixed flags, an nvcc register cap, are applied to it)."""
        return f"{SHIPPED} ({self.origin})"

    def values(self) -> dict[str, Value]:
        """Each searched setting's shipped value, by parameter name."""
        return {s.name: s.value for s in self.settings}


@dataclass(frozen=True)
class KernelSpec:
    """Everything the tuner needs to know about one kernel source file."""

    name: str
    source: Path
    arch: str
    entries: tuple[str, ...]
    block_size: int | str
    dynamic_smem: int
    defines: tuple[tuple[str, str], ...]
    tuned_defines: tuple[tuple[str, tuple[int | str, ...]], ...]
    include_dirs: tuple[Path, ...]  # every include folder, -isystem ones too (the bundle carries them all)
    compile_timeout_s: float
    allow_numerics: bool
    allow_semantics: bool
    # Measuring on a GPU (objective time): output tolerance against the baseline, how the
    # executable reports its time, and extra arguments for it (e.g. --set n=4096).
    rtol: float = 1e-5
    atol: float = 1e-6
    mode: str = "harness"  # "harness" (compileiq/harness.cuh) or "program" (its own timing line)
    metric_regex: str | None = None  # program mode: the time in ms is the regex's first group
    run_args: tuple[str, ...] = ()
    nvcc_flags: BaseFlags = field(default_factory=BaseFlags)  # what the code needs to build at all
    launch: tuple[LaunchFacts, ...] = ()  # per-entry launch facts ([launch.NAME] tables)
    block_size_given: bool = False  # block_size set in tune.toml (else from __launch_bounds__)
    restrictions: tuple[str, ...] = ()  # [tune] restrictions: conditions over macros (`restrictions`)
    shipped: ShippedBuild | None = None  # --compile-commands: the build the baseline reproduces
    arch_overridden: str | None = None  # where --arch chose another: "sm_80 that tune.toml gives"
    toml_arch: str | None = None  # tune.toml's `arch` as given (None: it gives none), which a compile command may replace
    archs_left_out: tuple[str, ...] = ()  # a multi-arch compile command's archs other than `arch` (not tuned)
    system_dirs: tuple[Path, ...] = ()  # those of `include_dirs` given as -isystem (searched after every -I)

    def include_flag(self, folder: Path, text: str) -> str:
        """How a build names one of `include_dirs` (`text`: as it gives the folder): -isystem=DIR for a
        system folder (never rewritten to -I: that changes which copy of a header is read), else -IDIR."""
        return f"{SYSTEM}{text}" if folder in self.system_dirs else f"-I{text}"

    def block_size_for(self, config_values: Mapping[str, Any]) -> int:
        """Threads per block under a config; a define-named size reads ``define.NAME``.

        A config without that key gets the define's default (its first listed value).
        """
        if isinstance(self.block_size, int):
            return self.block_size
        key = f"define.{self.block_size}"
        value = config_values.get(key, self.default_values()[key])
        try:
            return int(value)
        except (TypeError, ValueError):
            raise KernelError(f"{key} = {value!r} is not a block size") from None

    def fixed_define_args(self) -> tuple[str, ...]:
        """The ``-DNAME=VALUE`` arguments of the fixed defines."""
        return tuple(f"-D{name}={value}" for name, value in self.defines)

    def default_values(self) -> dict[str, int | str]:
        """Each tuned define's default (first listed) value, keyed ``define.NAME``."""
        return {f"define.{name}": values[0] for name, values in self.tuned_defines}

    def settings(self, legacy: bool = False) -> dict[str, Any]:
        """Every tune.toml setting that changes a build or a score, as plain JSON data. `legacy`: as
        releases before 2026-12-06 gave them, with the shipped values as the command spells them
        (a -D at tune.toml's first value, a fast-math twin: `legacy_shipped`), so that the studies and
        ACFs recorded under that identity are still found (`identities`)."""
        return {
            "entries": list(self.entries), "block_size": [self.block_size, self.block_size_given],
            "dynamic_smem": self.dynamic_smem, "defines": [list(d) for d in self.defines],
            "tuned_defines": [[name, list(values)] for name, values in self.tuned_defines],
            "nvcc_flags": list(self.nvcc_flags.flags),
            "launch": [[f.entry, f.block_size, f.dynamic_smem] for f in self.launch],
            "rtol": self.rtol, "atol": self.atol, "mode": self.mode,
            "metric_regex": self.metric_regex, "run_args": list(self.run_args),
            **({"restrictions": list(self.restrictions)} if self.restrictions else {}),  # older studies keep their identity
            **({"ptx_arch": self.ptx_arch} if self.ptx_arch != self.arch else {}),  # likewise
        } | self._shipped_settings(legacy)  # fmt: skip

    @property
    def ptx_arch(self) -> str:
        """The arch the front end compiles PTX for (`arch_code.ptx_arch`): the shipped build's
        compute_80 where it makes sm_86 machine code from it (its -code list may name other archs,
        left out), else the arch tuned."""
        return ptx_arch((f.flag for f in self.shipped.fixed) if self.shipped is not None else (), self.arch)

    def _shipped_settings(self, legacy: bool = False) -> dict[str, Any]:
        """The shipped build's settings change the baseline, hence the study (absent without them:
        older studies keep their identity). A tuned macro's -D at tune.toml's first value is the
        baseline every build without it has, and a fast-math twin the build its twin is: no change
        (`shipped_values`)."""
        values = self.legacy_shipped() if legacy else self.shipped_values()
        return {"shipped": dict(sorted(values.items()))} if values else {}

    def legacy_shipped(self) -> dict[str, Value]:
        """The shipped build's searched settings as the study identity named them before 2026-12-06:
        every one the command gives, as it spells it."""
        return self.shipped.values() if self.shipped is not None else {}

    def shipped_values(self) -> dict[str, Value]:
        """The shipped build's searched settings that make its baseline other than the one without
        a compile command's word for them: each but a tuned macro's -D at tune.toml's first value
        (which every build without it has; `flags` of an ACF that kept it adds it), and each at the
        value another of them implies (`--use_fast_math --ftz=true` builds what `--use_fast_math`
        does: `implied.without_implied`)."""
        values = implied.without_implied(self.legacy_shipped())
        first = self.default_values()
        return {k: v for k, v in values.items() if k not in first or first[k] != v}

    def identities(self) -> tuple[dict[str, Any], ...]:
        """The kernel's settings (`settings`) under each identity it has: this release's first,
        then, where other, the one releases before 2026-12-06 gave it. Studies and ACFs recorded
        under any of them describe this kernel: every comparison of an identity (the study a run
        continues, the warm start, the ACF replace guard, the gate) reads them here. The older one
        still holds `ptx_arch`: a compute_80 -> sm_86 build was other code then, not continued."""
        now, older = self.settings(), self.settings(legacy=True)
        return (now,) if older == now else (now, older)

    def settings_sha256(self) -> str:
        """This release's identity of the settings (what an ACF records): the older one not built."""
        return _sha256(self.settings())

    def settings_sha256s(self) -> tuple[str, ...]:
        """Each identity of the settings (`identities`), this release's first."""
        return tuple(_sha256(s) for s in self.identities())

    def settings_sha256_as(self, recorded: object) -> str:
        """The identity of these settings an ACF records as `recorded` (its settings_sha256): that
        one where it is one of them (an ACF written before 2026-12-06 records the older one: the
        same settings, `identities`), else this release's."""
        identities = self.settings_sha256s()
        return recorded if isinstance(recorded, str) and recorded in identities else identities[0]

    def timed_as(self) -> tuple[str, str | None]:
        """How a timed run reports its time: the mode and, in program mode, the metric regex (what
        an ACF records as `kernel.mode` and `kernel.metric_regex`)."""
        return self.mode, self.metric_regex if self.mode == "program" else None

    def measured_as(self, program: bool, metric_regex: str | None) -> KernelSpec:
        """The spec as `--program`/`--metric-regex` time it (tune and gate both take them; either
        one means program mode and overrides tune.toml's `mode`); itself without them."""
        if not program and metric_regex is None:
            return self
        return replace(self, mode="program", metric_regex=metric_regex or self.metric_regex)


@dataclass(frozen=True)
class SourceBundle:
    """A kernel's source and every header it reads (outside the toolchain) as bytes, for a
    worker with no shared disk, with the arguments that build it there."""

    main: str
    files: tuple[tuple[str, bytes], ...]
    include_args: tuple[str, ...]
    sha256: str  # the files, their paths and the arguments below
    base_args: tuple[str, ...] = ()  # the kernel's base flags (and -x cu for a header), no -I
    enumerators: tuple[tuple[str, str], ...] = ()  # tune.toml's enumerator arguments, as mangled names decode them (`enumerators`)
    origins: tuple[str, ...] = ()  # where `files` were read on this machine: inputs no output may replace

    @property
    def relocatable(self) -> bool:
        """Built with -rdc=true: ptxas must assemble its PTX with --compile-only."""
        return "-rdc=true" in self.base_args

    @property
    def ptxas_base_args(self) -> tuple[str, ...]:
        """What the base flags tell ptxas (`ptxas_cap_args`)."""
        return ptxas_cap_args(self.base_args)

    def write_to(self, directory: Path) -> Path:
        """Materialise the bundle under ``directory``; return the main file's path."""
        for rel, content in self.files:
            if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts or path_problem(rel):
                raise KernelError(f"unsafe path in source bundle: {rel!r}")
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return directory / self.main


def resolved(path: Path, what: str) -> Path:
    """``path`` made absolute with its links followed; KernelError (one line) for a symlink loop."""
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):  # RuntimeError: Python < 3.13's "Symlink loop"
        raise KernelError(f"{what} {path} is a symlink loop") from None


def _sha256(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

