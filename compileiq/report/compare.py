"""`compileiq report --compare A B`: what differs between two studies of a kernel.

Which parts of the study key differ (toolchain, arch, the study key's hash, space, objective: each
under its label of `core.key_labels`; where the hash differs, which base flags and whether the
sources do, as each study's run recorded them: `compare_inputs`), where the
baselines differ (two builds the project ships: the settings each study's first trial builds, a
setting it does not search at the compiler's default, one its base flags fix as that flag), how the
baseline and chosen values moved, which chosen settings changed, and whether each study's choice
(its settings, a kept baseline included) still holds in the other: its config looked up among the
other study's recorded trials (nothing is built here), and it holds when it still beats that
study's baseline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.key_labels import key_label
from compileiq.core.readings import exact, reading
from compileiq.core.records import QUARANTINED, STATIC_KIND, TrialCounts, TrialState, first_line
from compileiq.report.compare_inputs import BASE_FLAG, KeyInputs
from compileiq.report.html_parts import html_document, html_note, html_section, html_table
from compileiq.report.markdown import md_table, md_text
from compileiq.report.output import check_format, write_file, written
from compileiq.report.page import values_text
from compileiq.results import multi_objective
from compileiq.results.baseline_labels import baseline_label, compiler_defaults, json_text
from compileiq.results.explain import Explanation, changed_settings, explain
from compileiq.results.recorded_sources import fixed_settings, recorded_flags, recorded_path
from compileiq.results.shipped_origin import recorded_origin
from compileiq.results.study_labels import kernel_labels
from compileiq.store import Store


@dataclass(frozen=True)
class Holds:
    choice_of: str  # the study whose chosen config is checked
    checked_in: str  # the study it is looked up in
    value: float | None  # its value there (None: not recorded there, or failed)
    baseline: float | None  # that study's baseline value
    best: float | None  # that study's chosen value
    verdict: str


@dataclass(frozen=True)
class Comparison:
    a: Explanation
    b: Explanation
    key_changes: tuple[tuple[str, str, str], ...]  # (field as people read it, a, b)
    baseline_changes: tuple[tuple[str, Any, Any], ...]  # ("baseline SETTING" or "baseline", a, b)
    setting_changes: tuple[tuple[str, Any, Any], ...]  # (setting, chosen in a, chosen in b)
    holds: tuple[Holds, ...]
    inputs: KeyInputs | None = None  # where the study key's hash differs: the base flags and sources behind it
    # each study's kernel as `show` names it (`study_labels`: two files of one name told apart by their
    # recorded paths, never a path that fails `recorded_sources`' checks); its kernel name elsewhere
    files: tuple[str, str] = ("", "")

    @property
    def differ(self) -> tuple[tuple[str, Any, Any], ...]:
        """The key table's rows: which file each study is (where two of one name differ), the key's
        parts, what its hash holds, then the baselines."""
        told_apart = self.files[0] != self.a.study.key.kernel or self.files[1] != self.b.study.key.kernel
        files = (("kernel file", *self.files),) if told_apart else ()
        return (*files, *self.key_changes, *(self.inputs.rows() if self.inputs else ()), *self.baseline_changes)

    def named(self, e: Explanation) -> str:
        """A study as the report names it: "k-static-3e645092 (a/k.cu)" where its file is told apart."""
        file = self.files[0] if e is self.a else self.files[1]
        return e.study.name if file in ("", e.study.key.kernel) else f"{e.study.name} ({file})"

    def inputs_note(self) -> str:
        return self.inputs.note() if self.inputs else ""

    @property
    def same_objective(self) -> bool:
        return self.a.study.key.objective == self.b.study.key.objective


def compare(store: Store, first: str, second: str) -> Comparison:
    a, b = (_explained(store, name) for name in (first, second))
    if a.study.id == b.study.id:
        raise UsageError(f"--compare takes two different studies; both name {a.study.name}")
    ka, kb = asdict(a.study.key), asdict(b.study.key)
    keys = tuple((key_label(f), str(ka[f]), str(kb[f])) for f in ka if ka[f] != kb[f])
    built_a, built_b = (_Built.of(e, same_flags=ka["source_sha256"] == kb["source_sha256"]) for e in (a, b))
    chosen_a, chosen_b = (_chosen(e) for e in (a, b))
    settings = tuple((n, _spelled(chosen_a[n] if n in chosen_a else _kept(a, built_a, n)),
                      _spelled(chosen_b[n] if n in chosen_b else _kept(b, built_b, n)))
                     for n in sorted(set(chosen_a) | set(chosen_b)))
    baselines = tuple((row, _spelled(va), _spelled(vb)) for row, va, vb in _baseline_changes(a, b, built_a, built_b))
    shipped = tuple(n for row, va, vb in baselines if (n := row.removeprefix("baseline ")) != row
                    and n not in built_a.fixed and n not in built_b.fixed and "-" not in (va, vb))
    inputs = KeyInputs.of(a.runs, b.runs, shipped) if ka["source_sha256"] != kb["source_sha256"] else None
    labels = kernel_labels([(e.study.key.kernel, recorded_path(e.runs, e.study.key.kernel)) for e in (a, b)])
    return Comparison(a, b, keys, baselines, settings,
                      (_holds(a, b, built_a, built_b), _holds(b, a, built_b, built_a)), inputs, (labels[0], labels[1]))


def _spelled(value: Any) -> Any:
    """A setting's value as tune.toml, the flags and `show` spell it (true, not True)."""
    return json_text(value) if isinstance(value, bool) else value


@dataclass(frozen=True)
class _Built:
    """A study's trials as the builds they are: a compiler setting the study neither searched nor
    held (another --only, --exclude or risk class) is not passed, so it builds at the compiler's
    default. Compared so, two studies of one build with different spaces have the same baseline and
    find each other's choices. nvcc's register cap is left out of the space also where the base
    flags hold a cap (`space_choice.without_capped`): it is taken as the default only where the
    studies' identities (flags included) are the same, which rules that out. Where the study's run
    recorded its base flags, a cap among them is what its every build gets instead, named as the
    base flag it is ("-maxrregcount=64 (base flag)"), never as a setting's default or a shipped value."""

    defaults: dict[str, Any]  # the compiler defaults to complete a config with
    fixed: dict[str, str]  # the settings the recorded base flags fix, as the flag (`fixed_settings`), "... (base flag)"

    @classmethod
    def of(cls, e: Explanation, same_flags: bool) -> _Built:
        fixed = fixed_settings(recorded_flags(e.runs))
        return cls(compiler_defaults(e.study, register_cap=same_flags), {n: f"{f} {BASE_FLAG}" for n, f in fixed.items()})

    def config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The build `config` is: a base flag's cap over a setting's (nvcc hands ptxas its own after
        any -Xptxas setting: `base_flags.ptxas_cap_args`)."""
        return {**self.defaults, **config, **self.fixed}

    def same(self, mine: dict[str, Any], other: _Built, theirs: dict[str, Any]) -> bool:
        return self.config(mine) == other.config(theirs)


def _baseline_changes(a: Explanation, b: Explanation, built_a: _Built,
                      built_b: _Built) -> tuple[tuple[str, Any, Any], ...]:
    """Where the two baselines differ: how each view names it (the compilation database it was
    read from, or the compiler defaults), and each setting the two first trials build differently
    (`_Built`: "-" where a study's build leaves it unknown)."""
    la, lb = (baseline_label(e.study, e.baseline, recorded_origin(e.runs)) for e in (a, b))
    rows: list[tuple[str, Any, Any]] = [("baseline", la, lb)] if la != lb else []
    if a.baseline is not None and b.baseline is not None:
        ca, cb = built_a.config(a.baseline.config), built_b.config(b.baseline.config)
        rows += [(f"baseline {n}", ca.get(n, "-"), cb.get(n, "-")) for n in sorted(set(ca) | set(cb))
                 if ca.get(n) != cb.get(n)]
    return tuple(rows)


def _chosen(e: Explanation) -> dict[str, Any]:
    """The settings a study's choice sets that its baseline does not, and its tuned macros: a macro
    is chosen even where the choice keeps the baseline's value (the ACF and `flags` give it)."""
    if e.chosen is None:
        return {}
    macros = {n: v for n, v in e.chosen.config.items() if n.startswith("define.")}
    return macros | changed_settings(e.chosen, e.baseline)


def kept_note(c: Comparison) -> str:
    """What each study's choice keeps of its baseline (all of it where the table is empty) and what
    that baseline is, in the words of the ACF's vs_defaults.against (`Explanation.against`), never "defaults" for a build
    that ships its own flags."""
    which = "Both choices keep their baseline" if not c.setting_changes else "Settings not listed keep each baseline's value"
    if c.a.against == c.b.against:
        return f"{which}: {c.a.against}."
    return f"{which}: A {c.a.against}; B {c.b.against}."


def _kept(e: Explanation, built: _Built, setting: str) -> str:
    """A setting the study's choice left at its baseline's value: that value, said so ("(default)"
    where its baseline does not set it); a setting its base flags fix, that flag (`_Built.fixed`)."""
    if setting in built.fixed:
        return built.fixed[setting]
    value = e.baseline.config.get(setting) if e.baseline is not None else None
    return "(default)" if value is None or value == "default" else f"{value} (its baseline)"


def _explained(store: Store, name: str) -> Explanation:
    study = store.find_study(name)
    trials = store.trials(study.id)
    if not trials:
        raise UsageError(f"study {study.name} has no trials yet: nothing to compare")
    return explain(study, trials, runs=store.runs(study.id))


def _holds(source: Explanation, target: Explanation, built: _Built, built_there: _Built) -> Holds:
    """Whether the source study's choice holds in the target: its build looked up among the
    target's trials (`_Built`: the same build under another space's settings)."""
    baseline = target.baseline.value if target.baseline else None
    best = target.chosen.value if target.chosen else None
    names = (source.study.name, target.study.name)
    if source.chosen is None:
        return Holds(*names, None, baseline, best, "no choice to check: no trial completed")
    chosen = source.chosen.config
    kept = source.baseline is not None and source.chosen.config_key == source.baseline.config_key
    if kept and target.baseline is not None and built.same(chosen, built_there, target.baseline.config):
        return Holds(*names, None, baseline, best, "nothing to check: it kept its baseline, that study's baseline too")
    if source.study.key.objective != target.study.key.objective:
        return Holds(*names, None, baseline, best, "not comparable: the studies have different objectives")
    found = next((t for t in target.trials if built.same(chosen, built_there, t.config)), None)
    if found is None or found.state is not TrialState.COMPLETE or found.value is None:
        verdict = ("not evaluated there" if found is None else
                   f"its row there was quarantined (#{found.number})" if (found.reason or "").startswith(QUARANTINED)
                   else f"failed there (#{found.number}: {first_line(found.reason, 120)})")
        return Holds(*names, None, baseline, best, verdict)
    what = "its baseline's settings (kept) " if kept else ""
    if baseline is not None and found.value < baseline:
        gap = "" if best is None else f"; its best is {values_text(target.study.key.objective, target.chosen)}"
        return Holds(*names, found.value, baseline, best, f"holds: {what}beat that baseline{gap}")
    if target.baseline is not None and found.number == target.baseline.number:
        return Holds(*names, found.value, baseline, best, "nothing gained there: it is that study's baseline")
    return Holds(*names, found.value, baseline, best, f"no longer holds: {what}no better than that baseline")


def write(store: Store, first: str, second: str, out: Path, fmt: str) -> list[Path]:
    check_format(fmt)
    comparison = compare(store, first, second)
    return written(write_file(out, html_page(comparison) if fmt == "html" else markdown(comparison)))


def _value_rows(c: Comparison) -> list[tuple[Any, ...]]:
    """Each study's baseline and chosen values as people read them (occupancy as occupancy, higher
    is better: the shortfall the search minimised is no one's number), and how much better."""
    rows = []
    for e in (c.a, c.b):
        objective = e.study.key.objective
        rows.append((c.named(e), objective_heading(objective), values_text(objective, e.baseline),
                     values_text(objective, e.chosen), _gain(objective, e), TrialCounts.of(e.trials).trials))
    return rows


def objective_heading(objective: str) -> str:
    """"occupancy (theoretical occupancy, higher is better)"; several objectives: each by name."""
    return ", ".join(f"{name} ({reading(name).heading})" for name in multi_objective.objectives_of(objective))


def _gain(objective: str, e: Explanation) -> str:
    """How much better the choice is than the baseline, in the objective's own reading ("-" with
    several objectives: a trade-off has no single gain)."""
    if multi_objective.is_multi(objective) or e.baseline is None or e.chosen is None:
        return "-"
    if e.baseline.value is None or e.chosen.value is None:
        return "-"
    gain = e.baseline.value - e.chosen.value  # the minimised values: their drop is the improvement
    if reading(objective).minimised_as:  # occupancy: its shortfall's drop is the occupancy gained
        return f"{gain * 100:+.1f} percentage points"
    return exact(gain)


VALUE_HEADER = ("study", "objective (unit, which way is better)", "baseline", "chosen", "gain (toward better)",
                "trials")
VALUES_TITLE = "Baseline and chosen values"


def kinds_note(c: Comparison) -> str:
    """What the values are: static estimates unless a study measured runtimes (said in every view)."""
    kinds = {("GPU runtime (ms)" if e.runtime else STATIC_KIND) for e in (c.a, c.b)}
    return "Values: " + " and ".join(sorted(kinds)) + "."
HOLDS_HEADER = ("choice of", "checked in", "value there", "that baseline", "that best", "verdict")


def _holds_rows(c: Comparison) -> list[tuple[Any, ...]]:
    """The holds table, each value in the reading of the study it was checked in."""
    rows = []
    for h, target in zip(c.holds, (c.b, c.a), strict=True):
        read = reading(target.study.key.objective)
        rows.append((h.choice_of, h.checked_in, read.text(h.value), read.text(h.baseline), read.text(h.best), h.verdict))
    return rows


def html_page(c: Comparison) -> str:
    differ = c.differ
    keys = html_table(("key", "A", "B"), differ) if differ else html_note("the study keys are equal")
    keys += html_note(c.inputs_note()) if c.inputs else ""
    settings = (html_table(("setting", "A chose", "B chose"), c.setting_changes) if c.setting_changes
                else "") + html_note(kept_note(c))
    note = html_note(kinds_note(c)) + ("" if c.same_objective else
                                       html_note("different objectives: the values are not comparable"))
    holds = html_table(HOLDS_HEADER, _holds_rows(c))
    body = (html_section("compare-keys", "What differs between the studies", keys)
            + html_section("compare-values", VALUES_TITLE, html_table(VALUE_HEADER, _value_rows(c)) + note)
            + html_section("compare-settings", "Chosen settings", settings)
            + html_section("compare-holds", "Does each choice still hold in the other study?", holds))
    return html_document(f"compileiq comparison: {c.named(c.a)} vs {c.named(c.b)}", body)


def markdown(c: Comparison) -> str:
    lines = [f"# compileiq comparison: {md_text(c.named(c.a))} vs {md_text(c.named(c.b))}", "",
             "## What differs between the studies", ""]
    differ = c.differ
    lines += md_table(("key", "A", "B"), differ) if differ else ["The study keys are equal."]
    lines += ["", md_text(c.inputs_note())] if c.inputs else []
    lines += ["", f"## {VALUES_TITLE}", "", *md_table(VALUE_HEADER, _value_rows(c)), "",
              md_text(kinds_note(c)), "", "## Chosen settings", ""]
    lines += [*md_table(("setting", "A chose", "B chose"), c.setting_changes), ""] if c.setting_changes else []
    lines.append(md_text(kept_note(c)))
    lines += ["", "## Does each choice still hold in the other study?", "",
              *md_table(HOLDS_HEADER, _holds_rows(c))]
    return "\n".join(lines) + "\n"
