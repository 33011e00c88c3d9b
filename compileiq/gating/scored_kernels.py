"""Which kernels an ACF's evidence scored, as the gate holds it to them.

tune.toml's `entries` narrow what the objective scores, but the ACF's -Xptxas flags build every
kernel of the file: the gate holds the kernels left unscored to the baseline too (`worse-than-default`,
as `eligibility.unscored_refusal` holds the tuning), and where the settings that decide what is scored
(`entries`; the launch facts, which only occupancy reads and `rules._not_its_code` already leaves out)
differ from those the ACF records, the same machine code scores other numbers: that is a changed
setting (`stale-settings`), never an edited evidence.
"""

from __future__ import annotations

from dataclasses import replace

from compileiq.evaluate.launch_bound import lowered_text, unlaunchable, unlaunchable_text
from compileiq.evaluate.unscored import unscored_harm, unscored_refusal
from compileiq.gating.rules import (
    Defaults,
    Hit,
    Measured,
    Recorded,
    baseline_evidence_hits,
    static_hits,
)
from compileiq.results import acf as acf_file
from compileiq.source.spec import KernelSpec


def unscored_hits(m: Measured, d: Defaults, objective: str) -> list[Hit]:
    """`worse-than-default` where the ACF's build makes a kernel tune.toml's entries leave unscored
    spill more (or lose occupancy the rules refuse) than the baseline's build of it does, kernel by
    kernel (`unscored_harm`). Both builds are measured now: `recorded` says the ACF's [evidence.baseline]
    holds no number for them, and `measured` gives the two, in the unit of the reason (spill bytes, or
    occupancy), for each kernel it names ("heavy_k: defaults 0 B, ACF 1276 B")."""
    base = d.build
    if m.failure is not None or base is None or base.failure is not None or base.unscored is None:
        return []
    why = unscored_refusal({"unscored": m.unscored.as_metric()} if m.unscored else {}, base.unscored, d.name,
                           objective == "static")
    if why is None:
        return []
    word = "defaults" if d.name == Defaults.name else "as shipped"  # as `rules.default_hits` names the baseline
    recorded = f"{word} unscored kernels: not recorded"
    harm = unscored_harm(m.unscored, base.unscored, objective == "static") if m.unscored else None
    measured = f"{word} unscored kernels read, ACF's not read" if harm is None else harm.measured(word)
    return [Hit("worse-than-default", recorded, measured, f"the ACF's build {why}")]


def bound_hits(m: Measured, d: Defaults) -> list[Hit]:
    """`launch-bound` where the ACF's build cannot launch a kernel of the file (scored or not) at the
    threads its own __launch_bounds__ declares and the baseline's build of it can at the bound that build
    declares (`launch_bound.unlaunchable`; a tuned macro may change the bound): both builds are rebuilt
    here, so no recorded number decides it."""
    word = "defaults" if d.name == Defaults.name else "as shipped"
    if d.bounds_lowered:  # the cubin's max threads per block below the bound the kernel declares
        first_lowered = d.bounds_lowered[0]
        return [Hit("launch-bound", f"{word}: {first_lowered.threads} threads",
                    f"ACF: at most {first_lowered.maxntid} threads",
                    f"the ACF's flags leave no launch of a kernel at its bound: {lowered_text(d.bounds_lowered)}, "
                    f"where {d.name}'s build launches it (its -Xptxas flags build every kernel of the file)")]
    base = d.build
    if m.failure is not None or m.bounds is None or base is None or base.failure is not None or base.bounds is None:
        return []
    if not (found := unlaunchable(m.bounds, base.bounds)):
        return []
    first = found[0]
    return [Hit("launch-bound", f"{word}: {first.registers_was} registers at {first.threads_was} threads",
                f"ACF: {first.registers} registers at {first.threads} threads",
                f"the ACF's flags leave no launch of {unlaunchable_text(found)}: more registers or shared memory than "
                f"an SM gives one block, where {d.name}'s build launches it (its -Xptxas flags build every kernel of "
                "the file; every launch at that bound fails: too many resources requested for launch)")]


def scoring_changed(acf: acf_file.Acf, spec: KernelSpec, recorded: Recorded, measured: Measured,
                    baseline: Recorded | None, defaults: Defaults) -> bool:
    """The kernel's settings differ from the ACF's in `entries` alone, what decides which kernels are
    scored, and its evidence is what the rebuilds give scored under the entries it records: it then
    scored other kernels than a rebuild does (`stale-settings`), and was not edited. The ACF's own word
    (its entries, its settings_sha256, a hash anyone can compute) is untrusted: the recorded identity
    must be this kernel's settings (`spec`, as the rebuild orders them) with the ACF's entries in place
    of tune.toml's, and every recorded number ([evidence.best], [evidence.baseline]) must match the
    rebuilds scored under those entries (`Measured.claimed`); numbers that match neither scoring were
    edited, and the `evidence` findings stand. Never for an ACF that records no entries (`acf.entries`
    None: written before they were recorded): nobody can tell what it scored."""
    if acf.entries is None or acf.entries == spec.entries:
        return False
    if not recorded.settings_sha256 or recorded.settings_sha256 == measured.settings_sha256:
        return False
    if recorded.settings_sha256 not in replace(spec, entries=acf.entries).settings_sha256s():
        return False
    claimed, base = measured.claimed, defaults.build
    if claimed is None or claimed.failure is not None:  # no kernel its entries name: its numbers are nobody's
        return False
    if any(hit.rule == "evidence" for hit in static_hits(recorded, claimed, "")):
        return False
    # the baseline's build scored likewise (itself where it is the ACF's build, or did not build: no finding)
    scored_base = replace(defaults, build=base.claimed) if base is not None and base.claimed is not None else defaults
    return not baseline_evidence_hits(baseline, scored_base)


def stale_scoring_hit(acf: acf_file.Acf, spec: KernelSpec, retune: str) -> Hit:
    """`stale-settings`: the evidence was scored under other kernel settings, said instead of `evidence`."""
    was = _named(acf.entries)
    now = _named(spec.entries)
    return Hit("stale-settings", f"entries {was}", f"entries {now}",
               f"the ACF's evidence was scored under other kernel settings (tune.toml's entries: {was} when tuned, "
               f"{now} now): the same machine code scores other numbers; its evidence is not this build's", retune)


def _named(entries: tuple[str, ...] | None) -> str:
    if entries is None:
        return "not recorded (an ACF written before entries were recorded)"
    return "[" + ", ".join(entries) + "]" if entries else "every kernel"
