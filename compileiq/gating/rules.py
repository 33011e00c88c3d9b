"""The gate's rules: each a name, a check and a severity; the static checks (the timing checks
are `timing_rules`').

Pure functions of what the ACF recorded and what the rebuild (or the GPU) measured: no I/O, so
the same inputs always give the same findings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from compileiq.core.errors import UsageError
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.launch_bound import Bounds, Lowered
from compileiq.evaluate.unscored import Unscored
from compileiq.gating.recorded_launch import RecordedLaunch, ScoredKernel, occupancy_at
from compileiq.gating.settings_change import entries_change, launch_changes


class Severity(str, Enum):
    ERROR = "error"
    WARN = "warn"
    OFF = "off"


@dataclass(frozen=True)
class Rule:
    name: str
    severity: Severity  # the default
    summary: str


RULES = (
    Rule("build", Severity.ERROR, "the kernel no longer builds with the ACF's flags"),
    Rule("spills", Severity.ERROR, "spill bytes appeared or grew"),
    Rule("occupancy", Severity.ERROR, "occupancy fell below the recorded value"),
    Rule("worse-than-default", Severity.ERROR, "more spills or lower occupancy than the compiler defaults with no "
         "recorded gain that justifies it, or a lower ptxas optimisation level without a recorded runtime gain"),
    Rule("launch-bound", Severity.ERROR, "a kernel of the file (scored or not) that the baseline's build can launch "
         "at the threads its __launch_bounds__ declares cannot be launched there with the ACF's flags (more registers "
         "or shared memory than an SM gives one block)"),
    Rule("risk-not-allowed", Severity.ERROR, "the ACF turns on a numerics-changing or semantics-assuming setting "
         "(fast math, ftz, prec-div, prec-sqrt, fmad, restrict...) that the build that ships does not set and its "
         "tuning was not allowed to search (--allow-numerics/--allow-semantics, tune.toml's allow_*)"),
    Rule("lowered-optimisation", Severity.ERROR, "the compile command that ships lowers ptxas's optimisation (-O, "
         "expensive optimisations, optimizer constants) below both the ACF's choice and the build it was tuned from"),
    Rule("registers", Severity.WARN, "registers per thread rose above the recorded value"),
    Rule("instructions", Severity.WARN, "the static instruction count rose above the recorded value (ACFs whose "
         "objectives include instructions)"),
    Rule("code-changed", Severity.WARN, "the kernel's machine code differs from the recorded code (the source, "
         "tune.toml settings or toolchain changed since the tuning)"),
    Rule("uncited-code", Severity.ERROR, "the kernel source, tune.toml settings and toolchain are the ones the ACF "
         "was tuned with, yet its settings do not rebuild the code its evidence cites: they were edited after it was "
         "written (its [controls]/[args]), or a header outside the kernel's bundle changed"),
    Rule("evidence", Severity.ERROR, "the same machine code as recorded gives other numbers than the ACF records "
         "(spills, registers, instructions; occupancy at the launch it records, or where the launch settings are "
         "unchanged; where they are not, a figure no launch reproduces): its evidence was edited"),
    Rule("runtime-claim", Severity.WARN, "a static gate passes a departure from the defaults (a lower ptxas "
         "optimisation level, more spills, lower occupancy) on the ACF's recorded runtime gain alone, which only "
         "`gate --device` can check"),
    Rule("stale-source", Severity.WARN, "the kernel source differs from the tuned source"),
    Rule("stale-settings", Severity.WARN, "the kernel's tune.toml settings (launch facts, macros, base flags, "
         "tolerances), or the compile command its [baseline] names, differ from those it was tuned with"),
    Rule("stale-toolchain", Severity.WARN, "the compiler build differs from the tuning one"),
    Rule("slower-than-default", Severity.ERROR, "timing: the ACF's build is SLOWER than the baseline tune started from"),
    Rule("slower-than-recorded", Severity.ERROR, "timing: the ACF's build is SLOWER than recorded"),
)
RULE_NAMES = tuple(rule.name for rule in RULES)


def severities(overrides: Iterable[str] = ()) -> dict[str, Severity]:
    """Each rule's severity: the defaults, then each `NAME=SEVERITY` override in order."""
    table = {rule.name: rule.severity for rule in RULES}
    for text in overrides:
        name, _, value = text.partition("=")
        if name.strip() not in table:
            raise UsageError(f"--rule {text!r}: unknown rule; rules: {', '.join(RULE_NAMES)}")
        choices = [s.value for s in Severity]
        if value.strip() not in choices:
            raise UsageError(f"--rule {text!r}: severity must be one of {', '.join(choices)}")
        table[name.strip()] = Severity(value.strip())
    return table


@dataclass(frozen=True)
class Recorded:
    """What the ACF recorded: its evidence.best, its source hash and its toolchain build."""

    spill_bytes: int
    registers: int
    occupancy: float
    code_hash: str
    source_sha256: str
    toolchain_build: str
    instructions: int | None = None  # checked when one of the ACF's objectives is instructions
    settings_sha256: str = ""  # tune.toml's build- and score-relevant settings (older ACFs: none)
    code_instructions: int | None = None  # what the ACF records for its code, whatever its objective (`evidence`)
    launch: RecordedLaunch | None = None  # the launch its occupancy was scored at (older ACFs: none whole)
    entries: tuple[str, ...] | None = None  # the kernels its objective scored ([kernel] entries; None: not recorded)


@dataclass(frozen=True)
class Measured:
    """The rebuild: metrics when it built, else the reason it did not."""

    source_sha256: str
    toolchain_build: str
    failure: str | None = None
    spill_bytes: int = 0
    registers: int = 0
    occupancy: float = 0.0
    code_hash: str = ""
    instructions: int = 0
    settings_sha256: str = ""
    unscored: Unscored | None = None  # the kernels tune.toml's entries leave unscored (`gating.scored_kernels`)
    claimed: Measured | None = None  # the same build scored under the entries the ACF records, where they are not
    # tune.toml's (its settings those with the ACF's entries): what its evidence must match to be another scoring's
    bounds: Bounds | None = None  # every kernel's __launch_bounds__, registers, shared memory (`launch-bound`)
    kernels: tuple[ScoredKernel, ...] = ()  # the kernels scored: their occupancy at a recorded launch (`evidence`)
    arch: str = ""  # what it was built for
    launch: RecordedLaunch | None = None  # the launch it was scored at (tune.toml's now), as an ACF records one
    entries: tuple[str, ...] = ()  # the kernels it was scored by (tune.toml's entries now)
    command_cap: str = ""  # a ptxas register cap the compile command gained since the tuning, kept in this
    # build (`measuring.with_commands_cap`), as the command spells it: "-Xptxas --maxrregcount=48"


@dataclass(frozen=True)
class Defaults:
    """The baseline's rebuild (the compiler defaults, or the shipped build an ACF's [baseline]
    records), and what in the ACF could justify departing from it."""

    failure: str | None = None
    spill_bytes: int = 0
    occupancy: float = 0.0
    lowered: tuple[str, ...] = ()  # the ACF's settings that lower ptxas's optimisation
    runtime_gain: str | None = None  # the ACF's recorded, confirmed runtime gain
    name: str = "the compiler defaults"  # what the baseline is, for the finding's text
    frontend_args: tuple[str, ...] = ()  # how the baseline is built (a timed gate builds it again)
    ptxas_args: tuple[str, ...] = ()
    build: Measured | None = None  # the baseline's rebuild, held to the ACF's [evidence.baseline]
    bounds_lowered: tuple[Lowered, ...] = ()  # kernels the ACF's --maxntid lowers, its baseline's not (`launch-bound`)


@dataclass(frozen=True)
class BaseFlagDifference:
    """An ACF's recorded base flags against the kernel's own (`gating.kernel_settings`)."""

    extra: tuple[str, ...]  # the ACF's base flags that the kernel's settings do not give
    missing: tuple[str, ...]  # the kernel's base flags that the ACF does not record

    def __bool__(self) -> bool:
        return bool(self.extra or self.missing)


@dataclass(frozen=True)
class Hit:
    """A rule that fired, before its severity is applied."""

    rule: str
    recorded: str
    measured: str
    message: str
    command: str = ""  # what re-tunes the ACF (stale rules): printed last, so that it can be pasted
    needs: tuple[str, ...] = ()  # what the command cannot run without (`retune_needs`): said before it


@dataclass(frozen=True)
class Finding:
    """A rule that fired: what the ACF recorded, what the rebuild measured, how much it matters."""

    rule: str
    severity: Severity
    recorded: str
    measured: str
    message: str
    command: str = ""  # what re-tunes the ACF (stale rules): a bare `compileiq tune ...`, pasteable
    needs: tuple[str, ...] = ()  # what that command cannot run without, said before it

    @property
    def said(self) -> str:
        """The message, and what the re-tune needs first (never part of the command)."""
        return "; ".join((self.message, *self.needs))

    @property
    def text(self) -> str:
        """The message, and the command that fixes it when there is one."""
        return f"{self.said}; re-tune: {self.command}" if self.command else self.said


def findings(hits: Iterable[Hit], table: Mapping[str, Severity]) -> tuple[Finding, ...]:
    """Apply severities (dropping rules that are off), in the fixed rule order."""
    ordered = sorted(hits, key=lambda hit: RULE_NAMES.index(hit.rule))
    return tuple(Finding(h.rule, table[h.rule], h.recorded, h.measured, h.message, h.command, h.needs) for h in ordered
                 if table[h.rule] is not Severity.OFF)


def static_hits(r: Recorded, m: Measured, retune: str, flags_only: bool = False) -> list[Hit]:
    """Every static rule that fires; `retune` is the command that re-tunes a stale ACF. `flags_only`:
    the sources hash differently only for their build flags (read with the ACF's, they hash as recorded)."""
    return [*_build_hits(r, m, retune), *_stale_hits(r, m, retune, flags_only)]


def _build_hits(r: Recorded, m: Measured, retune: str) -> list[Hit]:
    if m.failure is not None:
        return [Hit("build", "builds", m.failure, f"the kernel no longer builds with the ACF's flags: {m.failure}")]
    found: list[Hit] = []
    capped = f" (with the compile command's {m.command_cap}, which the ACF was not tuned with)" * bool(m.command_cap)
    if m.spill_bytes > r.spill_bytes:
        how = "appeared" if r.spill_bytes == 0 else "grew"
        found.append(Hit("spills", f"{r.spill_bytes} B", f"{m.spill_bytes} B",
                         f"spill bytes {how}: {r.spill_bytes} -> {m.spill_bytes}{capped}"))
    occupancy, where = comparable_occupancy(r, m)
    if occupancy < r.occupancy - 1e-9:
        found.append(Hit("occupancy", pct(r.occupancy), pct(occupancy) + " at the launch it records" * bool(where),
                         f"occupancy fell: {pct(r.occupancy)} -> {pct(occupancy)}{where}{capped}"))
    if m.registers > r.registers:
        found.append(Hit("registers", str(r.registers), str(m.registers),
                         f"registers per thread rose: {r.registers} -> {m.registers}{capped}"))
    if r.instructions is not None and m.instructions > r.instructions:
        found.append(Hit("instructions", str(r.instructions), str(m.instructions),
                         f"static instructions rose: {r.instructions} -> {m.instructions}{capped}"))
    if m.code_hash != r.code_hash:
        found.append(_code_hit(r, m, retune))
    elif differ := _not_its_code(r, m):
        recorded, measured = ", ".join(f"{n} {a}" for n, a, _ in differ), ", ".join(f"{n} {b}" for n, _, b in differ)
        found.append(Hit("evidence", recorded, measured,
                         f"the ACF records {recorded} for machine code that gives {measured} (the same code, "
                         f"{r.code_hash[:12]}): its evidence or its settings were edited; re-tune or restore it"))
    return found


def _code_hit(r: Recorded, m: Measured, retune: str) -> Hit:
    """`code-changed` where the source, settings or toolchain changed (the stale rules say which);
    `uncited-code` where none did: then the ACF's settings are not the ones its evidence was
    measured with (an older ACF without a settings hash cannot tell: code-changed)."""
    same_inputs = bool(r.settings_sha256) and (r.source_sha256, r.settings_sha256, r.toolchain_build) == (
        m.source_sha256, m.settings_sha256, m.toolchain_build)
    if not same_inputs:
        return Hit("code-changed", r.code_hash[:12], m.code_hash[:12], "the machine code differs from the recorded code")
    return Hit("uncited-code", r.code_hash[:12], m.code_hash[:12],
               f"the ACF's settings do not rebuild the code its evidence cites ([evidence.best] code_hash "
               f"{r.code_hash[:12]}) though the kernel source, tune.toml settings and toolchain are the ones it was "
               "tuned with: its [controls]/[args] were edited after it was written, or a header outside the kernel's "
               "bundle changed; its evidence is not for this configuration: restore the ACF, or re-tune", retune)


def _not_its_code(r: Recorded, m: Measured) -> list[tuple[str, str, str]]:
    """The recorded numbers that the same machine code does not give: spills, registers and
    instructions are the code's own; occupancy also depends on the launch settings: held to the
    rebuild's when those are the ones it was tuned with, else to the code's at the launch the
    evidence records (a settings hash edited to look stale no longer lets a forged one through)."""
    label = StaticMetrics.LABELS  # each metric's one name as people read it
    pairs = [(label["spill_bytes"], str(r.spill_bytes), str(m.spill_bytes)),
             (label["registers"], str(r.registers), str(m.registers))]
    if r.code_instructions is not None:
        pairs.append((label["instructions"], str(r.code_instructions), str(m.instructions)))
    if not r.settings_sha256 or r.settings_sha256 == m.settings_sha256:
        pairs.append((label["occupancy"], pct(r.occupancy), pct(m.occupancy)))
    elif r.launch is not None and (at := at_recorded_launch(r, m)) is not None and pct(at) != pct(r.occupancy):
        pairs.append((label["occupancy"], pct(r.occupancy), f"{pct(at)} at the launch it records ({r.launch.text})"))
    return [(name, a, b) for name, a, b in pairs if a != b]


def comparable_occupancy(r: Recorded, m: Measured) -> tuple[float, str]:
    """The rebuild's occupancy to hold the recorded one to, and where it was scored ("" at the
    rebuild's own launch): where tune.toml's settings are no longer the tuned ones, its launch may
    have changed (a teammate's block_size), and the rebuilt code is scored at the launch the evidence
    records, where the gate can recompute it there; else at the rebuild's (the tuned launch)."""
    if not r.settings_sha256 or r.settings_sha256 == m.settings_sha256 or r.launch is None:
        return m.occupancy, ""
    at = at_recorded_launch(r, m)
    if at is None or pct(at) == pct(m.occupancy):
        return m.occupancy, ""
    return at, f" at the launch it records ({r.launch.text})"


def at_recorded_launch(r: Recorded, m: Measured) -> float | None:
    """The rebuilt code's occupancy at the launch `r` records, scored as the ACF says it scored
    (`as_claimed`); None where it cannot be told (`occupancy_evidence` holds those)."""
    scored = as_claimed(m)
    return occupancy_at(r.launch, scored.kernels, scored.arch)


def as_claimed(m: Measured) -> Measured:
    """The rebuild scored under the entries the ACF records, where they are not tune.toml's (`claimed`)."""
    return m.claimed if m.claimed is not None and m.claimed.failure is None else m


def default_hits(m: Measured, d: Defaults, timed: bool = False, objective: str = "",
                 baseline: Recorded | None = None) -> list[Hit]:
    """`worse-than-default`: the ACF build against the defaults' build. A recorded runtime gain justifies
    anything; lower occupancy is also justified by fewer spill bytes (the trade the `spills` and `occupancy`
    objectives make), never for the `static` objective, which makes no trade (a hand-made `static` ACF that
    gave half the occupancy for no spills passed); a lower optimisation level by nothing else. A gate that
    does not time (`timed` False) cannot check the recorded gain, an untrusted number: what it would justify
    is then named (`runtime-claim`)."""
    if m.failure is not None or d.failure is not None:
        return []
    rule, unjustified = "worse-than-default", "with no recorded runtime gain"
    base = "defaults" if d.name == Defaults.name else "as shipped"  # the recorded column's word for the baseline
    found: list[Hit] = []  # both builds are measured now: `recorded` is the ACF's [evidence.baseline] number
    spills, occupancy = (f"{baseline.spill_bytes} B", pct(baseline.occupancy)) if baseline else ("not recorded",) * 2
    if m.spill_bytes > d.spill_bytes:
        found.append(Hit(rule, f"{base} {spills}", f"{base} {d.spill_bytes} B, ACF {m.spill_bytes} B",
                         f"spills more than {d.name} ({d.spill_bytes} -> {m.spill_bytes} B) {unjustified}"))
    if m.occupancy < d.occupancy - 1e-9 and (m.spill_bytes >= d.spill_bytes or objective == "static"):
        why = ("for the `static` objective, which gives no occupancy for fewer spills, with" if objective == "static"
               else "with no fewer spill bytes and")
        found.append(Hit(rule, f"{base} {occupancy}", f"{base} {pct(d.occupancy)}, ACF {pct(m.occupancy)}",
                         f"lower occupancy than {d.name} ({pct(d.occupancy)} -> {pct(m.occupancy)}) {why} no recorded "
                         "runtime gain"))
    if d.lowered:  # a static gain does not justify it: only a measured runtime can
        lowered = ", ".join(d.lowered)
        found.append(Hit(rule, "defaults' optimisation" if base == "defaults" else "shipped optimisation", lowered,
                         f"lowers ptxas optimisation vs {d.name} ({lowered}) {unjustified}"))
    if d.runtime_gain is None or not found or timed:  # timed: the timing rules check the gain itself
        return found if d.runtime_gain is None or not found else []
    departures = "; ".join(hit.message.removesuffix(f" {unjustified}").split(" with no ")[0] for hit in found)
    return [Hit("runtime-claim", d.runtime_gain, "not timed here",
                f"{departures}: justified only by the ACF's recorded {d.runtime_gain}, which a gate without a GPU "
                "cannot check (an ACF is untrusted): `compileiq gate --device` times it")]


def baseline_evidence_hits(recorded: Recorded | None, d: Defaults) -> list[Hit]:
    """`evidence` for the ACF's [evidence.baseline]: the baseline's rebuild, where it is the same
    machine code as recorded, must give the recorded numbers (an edited baseline forges the gain)."""
    built = d.build
    if recorded is None or built is None or built.failure is not None or built.code_hash != recorded.code_hash:
        return []
    if not (differ := _not_its_code(recorded, built)):
        return []
    was, now = ", ".join(f"{n} {a}" for n, a, _ in differ), ", ".join(f"{n} {b}" for n, _, b in differ)
    return [Hit("evidence", was, now, f"the ACF records {was} for the baseline's machine code, which gives {now} "
                f"(the same code, {recorded.code_hash[:12]}): its evidence was edited; re-tune or restore it")]


def _stale_hits(r: Recorded, m: Measured, retune: str, flags_only: bool) -> list[Hit]:
    """The source bundle's hash holds its build flags with its files: a changed flag alone is a
    changed setting, never a changed source (`flags_only`: the files hash as recorded)."""
    found = []
    settings = bool(r.settings_sha256) and m.settings_sha256 != r.settings_sha256
    if m.source_sha256 != r.source_sha256 and not flags_only:
        found.append(Hit("stale-source", r.source_sha256[:12], m.source_sha256[:12],
                         "the kernel source changed since the ACF was tuned", retune))
    elif m.source_sha256 != r.source_sha256 and not settings:
        found.append(Hit("stale-settings", r.source_sha256[:12], m.source_sha256[:12],
                         "the kernel's build flags changed since the ACF was tuned (its sources did not)", retune))
    if settings:
        found.append(_settings_hit(r, m, retune))
    if m.toolchain_build != r.toolchain_build:
        found.append(Hit("stale-toolchain", r.toolchain_build, m.toolchain_build,
                         "the compiler differs from the one the ACF was tuned with", retune))
    return found


def _settings_hit(r: Recorded, m: Measured, retune: str) -> Hit:
    """`stale-settings` for a changed settings hash: naming each change the ACF records the tuned
    value of (its launch, its entries), and what the ACF's choice gives at a new launch; else the hashes."""
    launch = launch_changes(r.launch, m.launch) if m.failure is None else ()
    changes = (*launch, *entries_change(r.entries, m.entries))
    said = "the kernel's tune.toml settings changed since the ACF was tuned"
    if not changes:
        return Hit("stale-settings", r.settings_sha256[:12], m.settings_sha256[:12], said, retune)
    said += ": " + ", ".join(change.text for change in changes)
    if launch and r.launch is not None and (at := at_recorded_launch(r, m)) is not None:
        said += (f"; at the new launch the ACF's build gives occupancy {pct(m.occupancy)} ({pct(at)} at the launch "
                 f"it records, {r.launch.text}): the launch is tune.toml's, not the ACF's")
    return Hit("stale-settings", ", ".join(f"{c.name} {c.was}" for c in changes),
               ", ".join(f"{c.name} {c.now}" for c in changes), said, retune)


def base_flag_hits(differ: BaseFlagDifference, origin: str, retune: str, capped: str = "") -> list[Hit]:
    """`stale-settings` for an ACF whose recorded base flags are not the kernel's own (`origin`
    says where those were read; `capped`: a clause of its own, how the kernel's nvcc -maxrregcount
    overrides or replaces the ACF's cap)."""
    if not differ:
        return []
    parts = [f"records {' '.join(differ.extra)}, which the kernel's settings do not give"] * bool(differ.extra)
    parts += [f"lacks {' '.join(differ.missing)}, which they give{'; ' * bool(capped)}{capped}"] * bool(differ.missing)
    return [Hit("stale-settings", " ".join(differ.extra) or "-", " ".join(differ.missing) or "-",
                f"the ACF's base flags are not the kernel's ({origin}): it {' and '.join(parts)}; it is judged "
                "against the kernel's own defaults", retune)]


def pct(value: float) -> str: return f"{value:.1%}"
