"""A study's report as markdown, its figures as SVG files beside it: the same content as the HTML
page (`page`), every text from the database made table-safe and printable."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from compileiq.core.key_labels import key_label
from compileiq.core.records import TrialCounts
from compileiq.core.text import db_option, markdown_cell
from compileiq.report.contributions import contribution_note, contribution_rows
from compileiq.report.figures import (
    contributions_svg,
    convergence_svg,
    importance_svg,
    pareto_svg,
)
from compileiq.report.html_parts import text
from compileiq.report.page import (
    TO_TIME_NOTE,
    StudyReport,
    changes_text,
    evidence_rows,
    pareto_note,
    pareto_rows,
    provenance_rows,
    to_time_rows,
    tuned,
)
from compileiq.results.baseline_labels import baseline_label
from compileiq.results.explain import changed_settings
from compileiq.results.shipped_origin import recorded_origin
from compileiq.search.importance import METHOD

MD_TRIALS = 20
NO_FIGURES = ("The figures are left out: markdown on standard output has no folder for the SVG files it links "
              "(`-o FILE.md` writes them beside it; `--format html -o -` gives one self-contained page with them).")


def markdown(report: StudyReport, stem: str | None) -> tuple[str, dict[str, str]]:
    """The markdown text and its figures (file name -> SVG text), to be written beside it; `stem`
    None (standard output): no figures, and a line that says so instead of links to no file."""
    e = report.explanation
    figures: dict[str, str] = {}

    def figure(name: str, svg: str) -> list[str]:
        if stem is None:
            return []
        figures[f"{stem}-{name}.svg"] = svg
        return [f"![{name}]({stem}-{name}.svg)", ""]

    lines = [f"# compileiq report: {md_text(e.study.name)}", "",
             (f"Objective: **{md_text(e.study.key.objective)}**, {md_text(report.kind)}; {md_text(report.heading)}. "
              f"{trials_count(report)}."), "",
             *(["## Convergence", "", *figure("convergence", convergence_svg(e.trials, report.value_label, report.reading))]
               if stem is not None else [NO_FIGURES, ""])]
    if e.baseline is not None and e.chosen is not None:
        lines += ["## Chosen configuration", "",
                  (f"Baseline {md_text(report.value_text(e.baseline))} → chosen (trial #{e.chosen.number}) "
                   f"{md_text(report.value_text(e.chosen))}."), "", md_text(f"Chosen by {e.decided_by}."), ""]
        changes = [(n, e.baseline.config.get(n), v) for n, v in changed_settings(e.chosen, e.baseline).items()]
        lines += (md_table(("setting", "baseline", "chosen"), changes) if changes
                  else [md_text(f"The {baseline_label(e.study, e.baseline, recorded_origin(e.runs))}'s settings.")])
        lines += ["", "Evidence, as the ACF states it:", "",
                  *md_table(*evidence_rows(report)), ""]
    lines += [*(f"**Note:** {md_text(note)}" for note in e.notes), ""] if e.notes else []
    if e.to_time:
        lines += ["## Candidates to time on a GPU", "", *md_table(*to_time_rows(report)), "", md_text(TO_TIME_NOTE), ""]
    ablation = e.ablation
    if ablation is not None and ablation.steps:
        lines += ["## Each setting's contribution", "", *figure("contributions", contributions_svg(ablation, report.value_label))]
        lines += md_table(*contribution_rows(report.explanation.study.key.objective, ablation))
        lines += ["", md_text(contribution_note(ablation)), ""]
    if report.importance.items:
        lines += ["## Surrogate importance", "", *figure("importance", importance_svg(report.importance)),
                  md_text(f"{METHOD} ({report.importance.trials} trials)."), ""]
    if report.front is not None and report.front.points:
        lines += ["## Pareto front", "", *figure("pareto", pareto_svg(report.front)), *md_table(*pareto_rows(report, report.front)),
                  "", md_text(pareto_note(report.front, tuned(report))), ""]
    complete = e.ranked()
    ranked = complete[:MD_TRIALS]
    shown = (f"The first {len(ranked)} of {len(complete)} complete trials" if len(ranked) < len(complete)
             else f"{len(complete)} complete trials")
    lines += [f"## {shown}, the chosen one first", ""]
    lines += md_table(("#", *report.value_labels, "status", "settings that differ from the baseline"),
                       [(t.number, *report.value_texts(t), e.status(t),
                         changes_text(t, e.baseline))
                        for t in ranked])
    if len(ranked) < len(complete):
        name, db = shlex.quote(e.study.name), db_option(report.database)
        lines += ["", md_text(f"{len(complete) - len(ranked)} more complete trials are in the HTML report "
                              f"(compileiq report {name} {db}) and in compileiq show {name} --top {len(complete)} {db}.")]
    lines += ["", "## Failures by reason", ""]
    lines += [f"- {len(g.trials)} × {md_text(g.reason)}" for g in report.failures] or ["No trial failed."]
    key = e.study.key
    lines += ["", "## Provenance", ""]
    lines += md_table(("", ""), [*provenance_rows(e), (key_label("space_id"), key.space_id),
                                  (key_label("evaluator"), key.evaluator), ("database", report.database)])
    return "\n".join(lines) + "\n", figures


def trials_count(report: StudyReport) -> str:
    """What the study's trials are: how many, how many complete, how many failed (`TrialCounts`, as `show`)."""
    return TrialCounts.of(report.explanation.trials).text()


def md_text(value: Any) -> str:
    """A value in markdown: table-safe, no HTML (`<`, `>`, `&` escaped; quotes read as quotes: markdown
    shows `&#x27;` as it is), and no control character (a terminal may `cat` the file)."""
    return markdown_cell(text(value))


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return ["| " + " | ".join(md_text(h) for h in header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(md_text(c) for c in row) + " |" for row in rows)]
