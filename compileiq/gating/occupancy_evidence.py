"""A recorded occupancy where the ACF's settings hash is not the kernel's: what the gate holds it to.

Where the hash is the kernel's, the recorded occupancy is held to the rebuild's (`rules._not_its_code`);
where it is not, tune.toml's launch may have changed since the tuning, or the ACF was edited to look
so (a garbage hash, a launch edited with the occupancy, a `dynamic_smem` deleted so that it reads as
an ACF written before it was recorded). An ACF is untrusted, so no such edit may leave a forged
figure a warning:

* a figure no rebuild of the same code reproduces is `evidence` (an error): not at the launch its
  table records (a whole one: `rules`; an older ACF's block size: with no amount of dynamic shared
  memory, `recorded_launch.possible_amounts`), nor at the launch the kernel's settings give now;
* where the ACF's baseline and best are built with the same macro values (it tunes none, or chooses
  the baseline's), one run scored both at one launch (launch facts are tune.toml's, over macros
  only): tables that record two launches, or older tables whose figures
  no one amount of dynamic shared memory gives both, are `evidence` (a baseline's launch edited for
  a forged gain);
* a figure of a table that records no launch at all (an ACF written before launches were recorded,
  or one whose launch was deleted) that the launch the kernel's settings give now does not give is
  `evidence` too, said as unverifiable rather than as an edit (`_no_launch`);
* a figure true at its recorded launch only, not at the one the kernel's settings give now, is a
  `stale-settings` warning that says what the rebuild gives there; an older table's (no dynamic
  shared memory recorded) says its figure is NOT vouched for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from compileiq.gating.recorded_launch import possible_amounts
from compileiq.gating.rules import Hit, Measured, Recorded, as_claimed, at_recorded_launch, pct
from compileiq.results import acf as acf_file

Checked = tuple[str, Recorded | None, Measured | None]  # an evidence table's name, its record, its rebuild


def same_macros(acf: acf_file.Acf, baseline_frontend: Sequence[str]) -> bool:
    """The ACF's best (its `[args] frontend`) and its baseline (as the gate rebuilds it,
    `baseline_frontend`) are built with the same macro values (-D), as where it tunes no macro or
    chooses the baseline's: one run scored both at one launch (tune.toml's launch is a function of
    its macros alone)."""
    def macros(args: Iterable[str]) -> set[str]:
        return {arg for arg in args if arg.startswith("-D")}
    return macros(acf.frontend_args) == macros(baseline_frontend)


def occupancy_hits(checked: Iterable[Checked], one_launch: bool) -> tuple[list[Hit], list[Hit]]:
    """(`evidence` hits, `stale-settings` hits) for the recorded occupancy of each (table, record,
    rebuild) whose code is the rebuild's and whose settings hash is not the kernel's; `one_launch`:
    baseline and best are built with the same macro values (`same_macros`)."""
    tables = list(checked)
    held: list[tuple[str, Recorded, Measured]] = [(table, r, m) for table, r, m in tables if r is not None and m is not None and _unvouched(r, m)]
    evidence, stale, unvouched = [], [], []
    for table, r, m in held:
        now = _now(m)
        at = at_recorded_launch(r, m)
        amounts = possible_amounts(r.launch, as_claimed(m).kernels, m.arch, pct(r.occupancy), pct)
        if pct(r.occupancy) in now or (at is not None and pct(at) != pct(r.occupancy)):  # the latter: `rules`'
            continue
        if at is not None and r.launch is not None:
            stale.append(Hit("stale-settings", f"[evidence.{table}] occupancy {pct(r.occupancy)} at {r.launch.text}",
                             f"{pct(m.occupancy)} at the launch the kernel's settings give now",
                             f"the ACF's [evidence.{table}] occupancy {pct(r.occupancy)} is the code's at the launch "
                             f"it records ({r.launch.text}), not the launch the kernel's settings give now, where "
                             f"the same code gives {pct(m.occupancy)}: its settings hash is not the kernel's "
                             "(tune.toml's launch changed, or the ACF was edited); re-tune"))
        elif amounts:
            unvouched.append(f"[evidence.{table}] {pct(r.occupancy)}")
        elif r.launch is None:
            evidence.append(_no_launch(table, r, m))
        else:
            where = (f"at the launch it records ({r.launch.text}) with any dynamic shared memory, nor "
                     if amounts is not None else f"at the launch it records ({r.launch.text}: not the kernels scored) nor ")
            evidence.append(Hit("evidence", f"[evidence.{table}] occupancy {pct(r.occupancy)}",
                                f"{pct(m.occupancy)} at the launch the kernel's settings give now",
                                f"no rebuild reproduces the ACF's [evidence.{table}] occupancy {pct(r.occupancy)}: "
                                f"the same code gives it neither {where}at the launch the kernel's settings give "
                                f"now ({pct(m.occupancy)}): its evidence or its launch was edited; re-tune or restore it"))
    if unvouched:
        listed = ", ".join(unvouched)
        stale.append(Hit("stale-settings", f"occupancy {listed}", "not checked",
                         f"the ACF's recorded occupancy ({listed}) is NOT vouched for: its settings hash is not the "
                         "kernel's (tune.toml's settings changed, or the hash was edited) and its evidence records no "
                         "dynamic_smem (an ACF written before it was recorded): some amount of dynamic shared memory "
                         "gives it at the block size it records, not the launch the kernel's settings give now; "
                         "re-tune for evidence the gate can check"))
    return evidence + (_two_launches(tables, held) if one_launch else []), stale


def _no_launch(table: str, r: Recorded, m: Measured) -> Hit:
    """`evidence` (an error) for a figure of a table that records no launch (an ACF written before
    launches were recorded), which the launch the kernel's settings give now does not reproduce: said
    as what it is, not as an edit, since an honest older ACF reads so after tune.toml's launch
    changed. An error all the same: an ACF is untrusted, and a warning would let anyone pass a forged
    occupancy by deleting its launch and its settings hash; only a re-tune records evidence to check."""
    return Hit("evidence", f"[evidence.{table}] occupancy {pct(r.occupancy)}, no launch recorded",
               f"{pct(m.occupancy)} at the launch the kernel's settings give now",
               f"the ACF's [evidence.{table}] occupancy {pct(r.occupancy)} records no launch, so its occupancy cannot "
               f"be checked after tune.toml's launch changed: the same code gives {pct(m.occupancy)} at the launch the "
               "kernel's settings give now; re-tune")


def _two_launches(tables: list[Checked], held: list[tuple[str, Recorded, Measured]]) -> list[Hit]:
    """`evidence` where the ACF's baseline and best, scored by one run at one launch, record two."""
    recorded = {table: r for table, r, _ in tables if r is not None}
    if not held:  # the settings hash is the kernel's (each figure is held to the rebuild's), or no code is the same
        return []
    best, baseline = recorded.get("best"), recorded.get("baseline")
    if best is None or baseline is None or best.launch is None or baseline.launch is None:
        return []
    if best.launch != baseline.launch:
        return [Hit("evidence", f"[evidence.baseline] at {baseline.launch.text}", f"[evidence.best] at {best.launch.text}",
                    f"the ACF records its [evidence.baseline] at {baseline.launch.text} and its [evidence.best] at "
                    f"{best.launch.text}, but builds both with the same macros: one run scores both at one launch: its evidence "
                    "was edited; re-tune or restore it")]
    both = {table: possible_amounts(r.launch, as_claimed(m).kernels, m.arch, pct(r.occupancy), pct)
            for table, r, m in held}
    amounts = [found for found in both.values() if found is not None]
    if len(amounts) < 2 or amounts[0] & amounts[1]:
        return []
    return [Hit("evidence", f"best {pct(best.occupancy)}, baseline {pct(baseline.occupancy)}", "no one launch gives both",
                f"no one amount of dynamic shared memory gives both the ACF's [evidence.best] occupancy "
                f"{pct(best.occupancy)} and its [evidence.baseline] {pct(baseline.occupancy)} at the "
                f"{best.launch.threads} threads per block it records, though it builds both with the same macros (one run scores "
                "both at one launch): its evidence was edited; re-tune or restore it")]


def _unvouched(r: Recorded, m: Measured) -> bool:
    return (m.failure is None and m.code_hash == r.code_hash and bool(r.settings_sha256)
            and r.settings_sha256 != m.settings_sha256)


def _now(m: Measured) -> set[str]:
    """The occupancy the same code gives at the launch the kernel's settings give now (under the
    entries tune.toml scores, and under those the ACF records)."""
    return {pct(m.occupancy), pct(as_claimed(m).occupancy)}
