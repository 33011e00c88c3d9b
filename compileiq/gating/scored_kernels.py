"""Which kernels an ACF's evidence scored, as the gate holds it to them.

tune.toml's `entries` narrow what the objective scores, but the ACF's -Xptxas flags build every
kernel of the file: the gate holds the kernels left unscored to the baseline too (`worse-than-default`,
as `eligibility.unscored_refusal` holds the tuning), and where the settings that decide what is scored
(`entries`; the launch facts, which only occupancy reads and `rules._not_its_code` already leaves out)
differ from those the ACF records, the same machine code scores other numbers: that is a changed
setting (`stale-settings`), never an edited evidence.
"""

from __future__ import annotations

from compileiq.evaluate.unscored import unscored_refusal
from compileiq.gating.rules import Defaults, Hit, Measured, Recorded
from compileiq.results import acf as acf_file
from compileiq.source.spec import KernelSpec


def unscored_hits(m: Measured, d: Defaults, objective: str) -> list[Hit]:
    """`worse-than-default` where the ACF's build makes the kernels tune.toml's entries leave unscored
    spill more (or lose occupancy the rules refuse) than the baseline's build of them does."""
    base = d.build
    if m.failure is not None or base is None or base.failure is not None or base.unscored is None:
        return []
    why = unscored_refusal({"unscored": m.unscored.as_metric()} if m.unscored else {}, base.unscored, d.name,
                           objective == "static")
    if why is None:
        return []
    now = m.unscored
    return [Hit("worse-than-default", f"unscored kernels {base.unscored.spill_bytes} B",
                f"unscored kernels {now.spill_bytes} B" if now else "not read", f"the ACF's build {why}")]


def scoring_changed(acf: acf_file.Acf, spec: KernelSpec, recorded: Recorded, measured: Measured) -> bool:
    """The kernel's settings differ from the ACF's in what decides which kernels are scored: its
    recorded entries (none: every kernel, or an ACF written before they were recorded) are not
    tune.toml's now. Its evidence then scored other kernels than a rebuild does."""
    if not recorded.settings_sha256 or recorded.settings_sha256 == measured.settings_sha256:
        return False
    return (acf.entries or ()) != spec.entries


def stale_scoring_hit(acf: acf_file.Acf, spec: KernelSpec, retune: str) -> Hit:
    """`stale-settings`: the evidence was scored under other kernel settings, said instead of `evidence`."""
    was = _named(acf.entries or ())
    now = _named(spec.entries)
    return Hit("stale-settings", f"entries {was}", f"entries {now}",
               f"the ACF's evidence was scored under other kernel settings (tune.toml's entries: {was} when tuned, "
               f"{now} now): the same machine code scores other numbers; its evidence is not this build's", retune)


def _named(entries: tuple[str, ...]) -> str:
    return "[" + ", ".join(entries) + "]" if entries else "every kernel"
