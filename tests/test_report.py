"""`compileiq report`: a self-contained page opened in real headless Chromium, its size, escaping,
the exact random-search reference, markdown output and study comparison."""

import itertools
import json
import os
import random
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
from helpers import run_cli

from compileiq.core.records import StudyKey, TrialState
from compileiq.search.convergence import expected_random_best
from compileiq.store import Store

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
SECTIONS = ("summary", "convergence", "chosen", "contributions", "importance", "trials", "failures", "provenance")
SETTINGS = {
    "ptxas.maxrregcount": ["default", 32, 40, 48, 64, 80, 96, 128, 168, 255],
    "ptxas.override_directive_values": [False, True],
    "ptxas.opt_level": ["default", 0, 1, 2, 3],
    "ptxas.def_load_cache": ["default", "ca", "cg", "cv"],
    "nvcc.extra_device_vectorization": [False, True],
}
BASELINE = {name: values[0] for name, values in SETTINGS.items()}


def _spills(config: dict) -> float:
    """A made-up objective with a known shape: the override removes most spills, a high register
    cap the rest; other settings add a little noise."""
    value = 600.0
    if config["ptxas.override_directive_values"]:
        value -= 500
        if config["ptxas.maxrregcount"] in ("default", 255):
            value -= 100
    return value + (8 if config["ptxas.opt_level"] == 0 else 0)


def _key(**changes: str) -> StudyKey:
    fields = {"kernel": "fir", "source_sha256": "ab" * 32, "space_id": "nvcc-13.0+ptxas-13.0", "space_sha256": "cd" * 32,
              "toolchain": "cuda_13.0.r13.0", "arch": "sm_90", "evaluator": "static", "objective": "spills"}
    return StudyKey(**{**fields, **changes})


def synthetic_study(url: str, trials: int, name: str = "synthetic", seed: int = 0, key: StudyKey | None = None,
                    failures_every: int = 7) -> None:
    """A study of `trials` trials recorded through the public store API, as a tuner would: the
    baseline first, random configs, some failing with untrusted reasons."""
    rng = random.Random(seed)
    store = Store.open(url)
    study = store.get_or_create_study(key or _key(), name)
    configs = [BASELINE]
    while len(configs) < trials:
        config = {n: rng.choice(v) for n, v in SETTINGS.items()}
        if config not in configs:
            configs.append(config)
    for number, config in enumerate(configs):
        key_text = json.dumps(config, sort_keys=True, separators=(",", ":"))
        trial = store.claim_trials(study.id, [(key_text, config)], "test")[0]
        if number and number % failures_every == 0:
            store.finish_trial(trial.id, state=TrialState.FAILED, value=None, reason=f"ptxas fatal: {HOSTILE}\nmore",
                               metrics={}, code_hash=None, compile_seconds=0.1)
        else:
            value = _spills(config)
            metrics = {"spill_bytes": int(value), "registers": 128, "occupancy": 0.25, "instructions": 1400}
            store.finish_trial(trial.id, state=TrialState.COMPLETE, value=value, reason=None, metrics=metrics,
                               code_hash=f"{value:064.0f}", compile_seconds=0.1)
    store.close()


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install Debian's chromium package)")
        pytest.skip("chromium is not installed: apt-get install -y chromium")
    return found


def open_in_chromium(page: Path) -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and the console messages of the page."""
    done = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    return done.stdout, console


def _report(tmp_path: Path, study: str, *extra: str) -> Path:
    out = tmp_path / "out" / "report.html"
    result = run_cli(["report", study, "--db", f"sqlite:///{tmp_path}/t.db", "-o", str(out), *extra], tmp_path)
    assert result.returncode == 0, result.describe()
    return out


def test_the_report_opens_in_chromium_without_errors_and_has_every_section(tmp_path):
    synthetic_study(f"sqlite:///{tmp_path}/t.db", 60, name=HOSTILE)
    page = _report(tmp_path, HOSTILE)
    dom, console = open_in_chromium(page)
    assert console == []
    for section in SECTIONS:
        assert re.search(rf'<section id="{section}"><h2>', dom), section
    assert "static estimate" in dom and "runtime" not in dom.replace("not a runtime", "")
    assert "alert" in dom  # the hostile text is shown, as text:
    assert "<img" not in dom and dom.count("<script>") == 1
    assert "&lt;script&gt;alert" in dom
    html = page.read_text()
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html


def test_the_trial_table_sorts_in_the_browser(tmp_path):
    synthetic_study(f"sqlite:///{tmp_path}/t.db", 30)
    page = _report(tmp_path, "synthetic")
    clicked = page.with_name("clicked.html")  # the report plus one click on the value column's header
    script = "<script>document.querySelectorAll('#trials th')[2].click()</script></body>"
    clicked.write_text(page.read_text().replace("</body>", script))
    dom, console = open_in_chromium(clicked)
    assert console == []
    table = dom[dom.index('<section id="trials">'):]
    values = [float(v) for v in re.findall(r'<tr><td class="n" data-v="\d+">\d+</td><td>[^<]*</td>'
                                           r'<td class="n" data-v="([0-9.]+)">', table)]
    assert len(values) > 20
    assert values == sorted(values) and values[0] < values[-1]


@pytest.mark.parametrize("trials", [50, 200, pytest.param(500, marks=pytest.mark.slow)])
def test_report_size(tmp_path, trials):
    synthetic_study(f"sqlite:///{tmp_path}/t.db", trials)
    size = _report(tmp_path, "synthetic").stat().st_size
    print(f"report of {trials} trials: {size / 1024:.0f} KiB")
    if trials <= 200:
        assert size < 1_000_000


def test_expected_random_best_is_exact():
    values = [5.0, None, 3.0, 3.0, 9.0, None, 1.0, 4.0]
    expected = expected_random_best(values)
    for k in range(1, len(values) + 1):
        draws = [min(v for v in c if v is not None) for c in itertools.combinations(values, k)
                 if any(v is not None for v in c)]
        assert expected[k - 1] == pytest.approx(statistics.mean(draws))
    assert expected_random_best([None, None]) == [None, None]


def test_markdown_report_writes_svg_figures_beside_it(tmp_path):
    synthetic_study(f"sqlite:///{tmp_path}/t.db", 40, name="md|study")
    out = tmp_path / "summary" / "r.md"
    result = run_cli(["report", "md|study", "--db", f"sqlite:///{tmp_path}/t.db", "-o", str(out), "--format", "md"],
                     tmp_path)
    assert result.returncode == 0, result.describe()
    text = out.read_text()
    for figure in re.findall(r"!\[[a-z]+\]\(([^)]+)\)", text):
        assert (out.parent / figure).read_text().startswith("<svg")
    assert "r-convergence.svg" in text and "r-contributions.svg" in text
    assert "md\\|study" in text and "static estimate" in text
    assert "&lt;script>" in text and "<script>" not in text and "&gt;" not in text
    # the hint for the trials past the table names the study and its database (it printed
    # `compileiq show --top 40`, which lists studies, from the default database)
    assert f"compileiq show 'md\\|study' --top 35 --db sqlite:///{tmp_path}/t.db." in text, text
    assert f"compileiq report 'md\\|study' --db sqlite:///{tmp_path}/t.db)" in text


def test_format_markdown_is_md(tmp_path):
    """userfix 4: the README says `report` writes "HTML (or markdown)", but `--format markdown` was
    refused ("must be one of html, md"): it is md, its default file report.md."""
    synthetic_study(f"sqlite:///{tmp_path}/t.db", 10, name="s")
    result = run_cli(["report", "s", "--db", f"sqlite:///{tmp_path}/t.db", "--format", "markdown"], tmp_path)
    assert result.returncode == 0, result.describe()
    assert (tmp_path / "report.md").read_text().startswith("#") and not (tmp_path / "report.markdown").exists()


def test_markdown_keeps_an_arrow_readable_and_opens_no_blockquote(tmp_path):
    """A user read `lowers occupancy (100.0% -&gt; 75.0%)` in a raw markdown report: `>` was written
    as an entity although only `<` and `&` can open HTML. A `>` at a cell's start opens no quote."""
    from compileiq.core.text import markdown_cell

    assert markdown_cell("lowers occupancy (100.0% -> 75.0%)") == "lowers occupancy (100.0% -> 75.0%)"
    assert markdown_cell("> quoted <b>x</b> & y") == "\\> quoted &lt;b>x&lt;/b> &amp; y"


def test_dash_writes_the_report_to_standard_output_and_no_file(tmp_path):
    """`report S --format md -o -` wrote a file named `-` and figures named `--convergence.svg`."""
    db = f"sqlite:///{tmp_path}/t.db"
    synthetic_study(db, 30, name="s")
    work = tmp_path / "work"
    work.mkdir()
    md = run_cli(["report", "s", "--db", db, "--format", "md", "-o", "-"], work)
    assert md.returncode == 0 and list(work.iterdir()) == [], (md.describe(), list(work.iterdir()))
    assert md.stdout.startswith("# compileiq report: s\n") and "wrote" not in md.output, md.describe()
    assert "](" not in md.stdout and "The figures are left out" in md.stdout, md.stdout
    assert "## Each setting's contribution" in md.stdout
    page = run_cli(["report", "s", "--db", db, "-o", "-"], work)
    assert page.returncode == 0 and list(work.iterdir()) == [], page.describe()
    assert page.stdout.lstrip().lower().startswith("<!doctype html") and page.stdout.count("<svg") >= 2
    assert "wrote" not in page.output and not re.search(r'(src|href)="(?!#)', page.stdout), page.stdout[:300]


def test_a_markdown_report_carries_no_terminal_escapes_from_a_study_name(tmp_path):
    """A study named with an OSC sequence would retitle (or worse) the terminal that `cat`s the report."""
    name = "evil\x1b]0;pwned\x07\x1b[2J"
    synthetic_study(f"sqlite:///{tmp_path}/t.db", 10, name=name)
    result = run_cli(["report", "1", "--db", f"sqlite:///{tmp_path}/t.db", "-o", "r.md", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    text = (tmp_path / "r.md").read_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "evil\\x1b\\]0;pwned\\x07\\x1b\\[2J" in text  # shown, as escapes (brackets as text: no link)


def test_compare_two_studies(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    synthetic_study(url, 40, name="before")
    synthetic_study(url, 40, name="after", seed=1, key=_key(toolchain="cuda_13.1"), failures_every=1000)
    out = tmp_path / "compare.html"
    result = run_cli(["report", "--compare", "before", "after", "--db", url, "-o", str(out)], tmp_path)
    assert result.returncode == 0, result.describe()
    dom, console = open_in_chromium(out)
    assert console == []
    for section in ("compare-keys", "compare-values", "compare-settings", "compare-holds"):
        assert f'id="{section}"' in dom
    assert "cuda_13.1" in dom and "toolchain" in dom
    assert "holds: beats that baseline" in dom or "not evaluated there" in dom


def test_a_markdown_comparison_says_what_its_values_are(tmp_path):
    """The single-study report labels static estimates; the comparison did not."""
    url = f"sqlite:///{tmp_path}/t.db"
    synthetic_study(url, 20, name="before")
    synthetic_study(url, 20, name="after", seed=1, key=_key(toolchain="cuda_13.1"), failures_every=1000)
    result = run_cli(["report", "--compare", "before", "after", "--db", url, "-o", "c.md", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    text = (tmp_path / "c.md").read_text()
    assert "Values: static estimate (compiler output, not a runtime)." in text


@pytest.mark.parametrize(("args", "message"), [
    (["report", "nope"], "nope"),
    (["report", "--compare", "synthetic"], "--compare takes two studies"),
    (["report", "--compare", "synthetic", "1"], "--compare takes two different studies; both name synthetic"),
    (["report", "synthetic", "--format", "pdf"], "--format must be one of html, md"),
])
def test_bad_report_input_is_one_line(tmp_path, args, message):
    synthetic_study(f"sqlite:///{tmp_path}/t.db", 10)
    result = run_cli([*args, "--db", f"sqlite:///{tmp_path}/t.db"], tmp_path)
    assert result.returncode != 0
    assert len(result.stderr_lines) == 1 and message in result.stderr, result.describe()


@pytest.mark.postgres
def test_the_report_reads_a_postgresql_study(tmp_path, postgres_url):
    synthetic_study(postgres_url, 25, name="pg")
    out = tmp_path / "pg.html"
    result = run_cli(["report", "pg", "--db", postgres_url, "-o", str(out)], tmp_path)
    assert result.returncode == 0, result.describe()
    html = out.read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html
    assert "compileiq-test" not in html  # the password is not shown


def _metric_study(url: str) -> None:
    """Trials with known (registers, instructions): the front is #1, #2, #4; #3 and #5 are dominated."""
    store = Store.open(url)
    study = store.get_or_create_study(_key(objective="registers"), "tradeoffs")
    points = [(128, 1400), (40, 2000), (64, 1500), (72, 1700), (200, 1300), (128, 1500)]
    for number, (registers, instructions) in enumerate(points):
        config = {"ptxas.maxrregcount": "default" if number == 0 else registers + number}
        trial = store.claim_trials(study.id, [(json.dumps(config), config)], "test")[0]
        metrics = {"spill_bytes": 0, "registers": registers, "occupancy": 0.5, "instructions": instructions,
                   "stack_bytes": 0, "block_size": 256}
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=float(registers), reason=None, metrics=metrics,
                           code_hash=str(number), compile_seconds=0.1)
    store.close()


@pytest.mark.parametrize(("pick", "chosen"), [("first", 1), ("knee", 2), ("weights=0,1", 4), ("weights=1,0", 1)])
def test_show_pareto_lists_the_front_and_the_pick(tmp_path, pick, chosen):
    url = f"sqlite:///{tmp_path}/t.db"
    _metric_study(url)
    result = run_cli(["show", "tradeoffs", "--pareto", "registers,instructions", "--pick", pick, "--json",
                      "--db", url], tmp_path)
    assert result.returncode == 0, result.describe()
    data = json.loads(result.stdout)
    assert [p["trial"] for p in data["front"]] == [1, 2, 0, 4]
    assert data["pick"] == chosen


def test_the_report_plots_the_pareto_front(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    _metric_study(url)
    page = _report(tmp_path, "tradeoffs", "--pareto", "registers,instructions", "--pick", "knee")
    dom, console = open_in_chromium(page)
    assert console == []
    section = dom[dom.index('<section id="pareto">'):]
    section = section[:section.index("</section>")]
    assert "Pareto front" in section and "<svg" in section and "◀" in section


@pytest.mark.parametrize(("args", "message"), [
    (["--pareto", "registers"], "--pareto takes two or more distinct objectives"),
    (["--pareto", "registers,speed"], "--pareto takes two or more distinct objectives"),
    (["--pareto", "registers,time"], "the time objective needs a runtime study"),
    (["--pareto", "registers,spills", "--pick", "weights=1"], "--pick must be knee, first or weights=W1,W2"),
])
def test_bad_pareto_input_is_one_line(tmp_path, args, message):
    url = f"sqlite:///{tmp_path}/t.db"
    _metric_study(url)
    result = run_cli(["show", "tradeoffs", *args, "--db", url], tmp_path)
    assert result.returncode != 0
    assert len(result.stderr_lines) == 1 and message in result.stderr, result.describe()


def test_compare_verdicts_say_why_a_choice_cannot_be_checked(tmp_path):
    """A study that kept its baseline has nothing to check ('no longer holds' was its verdict), and
    a choice whose row in the other study was quarantined did not 'fail to build' there."""
    from compileiq.report.compare import compare

    url = f"sqlite:///{tmp_path}/t.db"
    synthetic_study(url, 1, name="kept")  # the baseline alone: the choice is the baseline
    synthetic_study(url, 20, name="tuned", key=_key(toolchain="cuda_13.1"), failures_every=1000)
    store = Store.open(url)
    try:
        tuned = compare(store, "tuned", "kept").a
        assert tuned.chosen is not None and tuned.baseline is not None and tuned.chosen.number != tuned.baseline.number
        other = store.get_or_create_study(_key(toolchain="cuda_13.2"), "other")
        for config, reason in ((BASELINE, None), (tuned.chosen.config, "quarantined: its row says value 0")):
            key_text = json.dumps(config, sort_keys=True, separators=(",", ":"))
            trial = store.claim_trials(other.id, [(key_text, config)], "test")[0]
            if reason is None:
                store.finish_trial(trial.id, state=TrialState.COMPLETE, value=_spills(config), reason=None,
                                   metrics={"spill_bytes": 1, "registers": 128, "occupancy": 0.25, "instructions": 1},
                                   code_hash="1" * 64, compile_seconds=0.1)
            else:
                store.finish_trial(trial.id, state=TrialState.FAILED, value=None, reason=reason, metrics={},
                                   code_hash=None, compile_seconds=0.1)
        kept = compare(store, "kept", "tuned").holds[0]
        quarantined = compare(store, "tuned", "other").holds[0]
    finally:
        store.close()
    assert kept.verdict == "nothing to check: it kept its baseline, that study's baseline too"
    assert quarantined.verdict == "its row there was quarantined (#1)"


def _launch_study(url: str) -> None:
    """A study of two tuned macros whose kernels have their own [launch.NAME] tables: each trial
    records the top-level default block size (256, which scored nothing) and each kernel's launch."""
    store = Store.open(url)
    study = store.get_or_create_study(_key(objective="instructions"), "launched")
    rows = [({"define.TILE": 32, "define.ROWS": 16}, 416.0, 512), ({"define.TILE": 32, "define.ROWS": 32}, 376.0, 1024),
            ({"define.TILE": 16, "define.ROWS": 16}, 400.0, 256)]
    for number, (config, value, threads) in enumerate(rows):
        trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True), config)], "test")[0]
        metrics = {"spill_bytes": 0, "registers": 20, "occupancy": 1.0, "instructions": int(value), "stack_bytes": 0,
                   "block_size": 256, "launch": {"_Z4copyPfS_ii": [threads, 0], "_Z5stagePf": [128, 2048]}}
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=value, reason=None, metrics=metrics,
                           code_hash=f"{number:064d}", compile_seconds=0.1)
    store.close()


def test_every_view_shows_each_kernels_launch_not_the_top_level_default(tmp_path):
    """tune.toml with [launch.NAME] tables only: the report and `show --json` said block_size 256
    (the default, which scored nothing) while the ACF said each kernel's own launch."""
    url = f"sqlite:///{tmp_path}/t.db"
    _launch_study(url)
    shown = run_cli(["show", "launched", "--json", "--db", url], tmp_path)
    assert shown.returncode == 0, shown.describe()
    trials = {t["number"]: t["metrics"] for t in json.loads(shown.stdout)["trials"]}
    assert trials[1]["launch_by_kernel"] == {"copy": {"block_size": 1024, "dynamic_smem": 0},
                                             "stage": {"block_size": 128, "dynamic_smem": 2048}}, trials[1]
    assert trials[0]["launch_by_kernel"]["copy"] == {"block_size": 512, "dynamic_smem": 0}
    assert all("block_size" not in m and "launch" not in m for m in trials.values()), trials
    page = _report(tmp_path, "launched").read_text()
    chosen = page[page.index('<section id="chosen">'):]
    chosen = chosen[:chosen.index("</section>")]
    assert "copy: 1024 threads; stage: 128 threads, 2048 B dynamic smem" in chosen, chosen
    assert "copy: 512 threads" in chosen and "block_size</th>" not in chosen


def test_a_macro_at_the_baselines_value_is_not_listed_as_differing(tmp_path):
    """The report listed the baseline's row as `ROWS=16 TILE=32` and the chosen TILE 32 | 32 under the
    settings that differ from the baseline; `show` (and the ACF) count only ROWS."""
    url = f"sqlite:///{tmp_path}/t.db"
    _launch_study(url)
    out = tmp_path / "r.md"
    result = run_cli(["report", "launched", "--db", url, "--format", "md", "-o", str(out)], tmp_path)
    assert result.returncode == 0, result.describe()
    text = out.read_text()
    assert "| define.ROWS | 16 | 32 |" in text and "define.TILE" not in text, text
    rows = {line.split(" | ")[0]: line.split(" | ")[-1] for line in text.splitlines() if re.match(r"\| \d+ \| ", line)}
    assert rows == {"| 1": "ROWS=32 |", "| 2": "TILE=16 |", "| 0": "(as the baseline) |"}, rows
    html = _report(tmp_path, "launched").read_text()
    assert "TILE=32" not in html and "ROWS=16" not in html


def test_a_comparison_shows_occupancy_as_occupancy(tmp_path):
    """`report --compare` listed an occupancy study's baseline and choice as `0 | 0` under "lower is
    better" (the shortfall the search minimises) where every other view says 100%, higher is better."""
    url = f"sqlite:///{tmp_path}/t.db"
    store = Store.open(url)
    study = store.get_or_create_study(_key(objective="occupancy"), "occ")
    for number, shortfall in enumerate((0.5, 0.25)):
        config = {**BASELINE, "ptxas.maxrregcount": SETTINGS["ptxas.maxrregcount"][number]}
        trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True), config)], "test")[0]
        metrics = {"spill_bytes": 0, "registers": 64, "occupancy": 1 - shortfall, "instructions": 10, "stack_bytes": 0}
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=shortfall, reason=None, metrics=metrics,
                           code_hash=f"{number:064d}", compile_seconds=0.1)
    store.close()
    synthetic_study(url, 10, name="spilly", failures_every=1000)
    result = run_cli(["report", "--compare", "occ", "spilly", "--db", url, "-o", "c.md", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    text = (tmp_path / "c.md").read_text()
    assert "lower is better)" not in text.split("\n## ")[2].splitlines()[0], text  # the section's title
    row = next(line for line in text.splitlines() if line.startswith("| occ |"))
    assert row == ("| occ | occupancy (theoretical occupancy, higher is better) | 50.0% | 75.0% "
                   "| +25.0 percentage points | 2 |"), row
    spilly = next(line for line in text.splitlines() if line.startswith("| spilly |"))
    assert "spill bytes, lower is better" in spilly


def test_a_comparison_of_two_shipped_builds_names_the_baselines_and_checks_a_kept_baseline(tmp_path):
    """User 48: two studies of one unchanged file shipped with and without a register cap. The
    comparison listed only `source_sha256` (read as the source's hash; it is the study key),
    not the baselines' difference, and said "nothing to check: it kept its baseline" of the study
    that kept its uncapped baseline, although those settings are the other study's choice there."""
    url = f"sqlite:///{tmp_path}/t.db"
    store = Store.open(url)
    capped = {**BASELINE, "ptxas.maxrregcount": 32}
    for name, configs in (("capped", ((capped, 24), (BASELINE, 0))), ("uncapped", ((BASELINE, 0), (capped, 24)))):
        study = store.get_or_create_study(_key(source_sha256=("ab" if name == "capped" else "ef") * 32), name)
        for number, (config, spills) in enumerate(configs):
            trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True), config)], "test")[0]
            metrics = {"spill_bytes": spills, "registers": 32, "occupancy": 1.0, "instructions": 10, "stack_bytes": 0}
            store.finish_trial(trial.id, state=TrialState.COMPLETE, value=spills, reason=None, metrics=metrics,
                               code_hash=f"{number + (0 if config == BASELINE else 10):064d}", compile_seconds=0.1)
    store.close()
    result = run_cli(["report", "--compare", "capped", "uncapped", "--db", url, "-o", "-", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    text = result.stdout
    assert "| study key (sources + flags + tune.toml + shipped settings) | abab" in text, text
    assert "source_sha256" not in text  # the ACF's name for the source bundle's hash (review 49 F3)
    assert "| baseline ptxas.maxrregcount | 32 | default |" in text, text
    holds = {line.split(" | ")[0]: line.split(" | ")[-1] for line in text.split("still hold")[1].splitlines()
             if line.startswith(("| capped", "| uncapped"))}
    assert holds == {"| uncapped": "holds: its baseline's settings (kept) beat that baseline; its best is 0 |",
                     "| capped": "nothing gained there: it is that study's baseline |"}, holds


def _two_objective_study(url: str, complete: int = 26, failed: int = 2) -> list[tuple[int, int]]:
    """A registers,instructions study: (registers, instructions) per complete trial, in order."""
    store = Store.open(url)
    study = store.get_or_create_study(_key(objective="registers,instructions"), "two")
    points = []
    for number in range(complete + failed):
        config = {**BASELINE, "ptxas.maxrregcount": "default" if number == 0 else 300 + number}
        trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True), config)], "test")[0]
        if number >= complete:
            store.finish_trial(trial.id, state=TrialState.FAILED, value=None, reason="ptxas fatal", metrics={},
                               code_hash=None, compile_seconds=0.1)
            continue
        registers, instructions = 80 - number % 5, 900 + 7 * number
        points.append((registers, instructions))
        metrics = {"spill_bytes": 0, "registers": registers, "occupancy": 0.5, "instructions": instructions,
                   "stack_bytes": 0}
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=float(registers), reason=None, metrics=metrics,
                           code_hash=f"{number:064d}", compile_seconds=0.1)
    store.close()
    return points


def test_a_multi_objective_report_gives_every_objectives_value_and_says_what_it_counts(tmp_path):
    """The trial table of a registers,instructions study was headed "registers,instructions" with one
    value a row (registers), and "20 trials" for a study of 28."""
    url = f"sqlite:///{tmp_path}/t.db"
    points = _two_objective_study(url)
    out = tmp_path / "r.md"
    result = run_cli(["report", "two", "--db", url, "--format", "md", "-o", str(out)], tmp_path)
    assert result.returncode == 0, result.describe()
    text = out.read_text()
    assert "28 trials (26 complete, 2 failed)" in text
    assert "## The first 20 of 26 complete trials, the chosen one first" in text, text
    header = next(line for line in text.splitlines() if line.startswith("| # | registers ("))
    assert header.count(" | ") == 4 and "| instructions (static estimate; SASS instructions" in header, header
    rows = [line.split(" | ") for line in text.split("the chosen one first")[1].splitlines() if re.match(r"\| \d+ \| ", line)]
    assert len(rows) == 20
    for row in rows:
        assert (int(row[1]), int(row[2])) == points[int(row[0].strip("| "))], row
    page = _report(tmp_path, "two").read_text()
    trials = page[page.index('<section id="trials">'):]
    assert "<th>registers (static estimate" in trials and "<th>instructions (static estimate" in trials
    assert "registers,instructions (" not in page


def test_show_json_lists_a_multi_objective_studys_trials(tmp_path):
    """`show --json` of a study of several objectives gave the front alone, no trials."""
    url = f"sqlite:///{tmp_path}/t.db"
    points = _two_objective_study(url)
    shown = run_cli(["show", "two", "--db", url, "--top", "100", "--json"], tmp_path)
    assert shown.returncode == 0, shown.describe()
    data = json.loads(shown.stdout)
    assert data["study"]["name"] == "two" and data["study"]["trials"] == 28 and data["complete_trials"] == 26
    assert len(data["trials"]) == 26 and len(data["failed"]) == 2
    first = data["trials"][0]
    assert first["status"] == "chosen" and first["number"] == data["pick"] == data["study"]["chosen"]
    for trial in data["trials"]:
        registers, instructions = points[trial["number"]]
        assert trial["values"] == {"registers": registers, "instructions": instructions}, trial
        assert {"value", "value_shown", "config", "metrics", "status", "provenance"} <= set(trial)
    assert data["front"] and data["pick_rule"] == "knee" and data["objectives"] == ["registers", "instructions"]


def test_a_printed_db_option_never_shows_a_masked_url() -> None:
    """A PostgreSQL URL is shown with its password masked: a printed command then named
    `--db 'postgresql+psycopg://u:***@h/db'`, which no one can paste (a red team's); it reads the
    URL from the environment instead, as the gate's re-tune command does."""
    from compileiq.core.text import db_option

    assert db_option("postgresql+psycopg://u:***@h/db") == '--db "$COMPILEIQ_DB"'
    assert db_option("sqlite:///x.db?mode=***") == '--db "$COMPILEIQ_DB"'
    assert db_option("sqlite:////abs/t.db") == "--db sqlite:////abs/t.db"
    assert db_option("sqlite:///rel/t.db") == f"--db sqlite:///{os.path.abspath('rel/t.db')}"


def test_a_setting_one_study_does_not_search_is_its_compiler_default_in_a_comparison(tmp_path):
    """Two studies of one build, one searching every setting and the macros, one `--only define.KU`
    (BS held): `report --compare` listed 11 baseline differences (`baseline ptxas.opt_level | 3 | -`)
    though both baselines build the compiler's defaults, and said each choice was "not evaluated" in
    the other study though both had built it. A setting a study does not search is built at the
    compiler's default; where the studies' flags differ, nvcc's register cap may be the base
    flags' instead (it leaves the space then), so it stays unknown there."""
    from compileiq.core.space_files import load_space
    from compileiq.report.compare import compare

    defaults = load_space("13.0").default_config().as_dict()
    url = f"sqlite:///{tmp_path}/t.db"

    def macros(ku: int) -> dict[str, int]:
        return {"define.BS": 64, "define.KU": ku}

    store = Store.open(url)
    studies = {"all": (_key(), ({**defaults, **macros(1)}, 10.0), ({**defaults, **macros(2)}, 5.0)),
               "only": (_key(space_sha256="ef" * 32), (macros(1), 10.0), (macros(2), 6.0)),
               "capped": (_key(source_sha256="ef" * 32, space_sha256="ef" * 32), (macros(1), 10.0))}
    for name, (key, *rows) in studies.items():
        study = store.get_or_create_study(key, name)
        for number, (config, value) in enumerate(rows):
            trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True), config)], "test")[0]
            metrics = {"spill_bytes": int(value), "registers": 32, "occupancy": 1.0, "instructions": 10,
                       "stack_bytes": 0}  # objective spills: the value its metrics give (else set aside on read)
            store.finish_trial(trial.id, state=TrialState.COMPLETE, value=value, reason=None, metrics=metrics,
                               code_hash=f"{number + 10 * len(name):064d}", compile_seconds=0.1)
    try:
        same = compare(store, "all", "only")
        other_flags = compare(store, "all", "capped")
    finally:
        store.close()
    assert same.baseline_changes == (), same.baseline_changes
    assert [h.verdict for h in same.holds] == ["holds: beat that baseline; its best is 6", "holds: beat that baseline; its best is 5"]
    assert [row for row in other_flags.baseline_changes if row[0].startswith("baseline ")] == [
        ("baseline ptxas.maxrregcount", "default", "-")], other_flags.baseline_changes


REDUCTION = Path(__file__).resolve().parents[1] / "kernels" / "reduction" / "reduction.cu"


def test_the_report_shows_the_acfs_source_bundle_hash_and_names_the_study_key_for_what_it_is(tmp_path):
    """Review 49 F3: the report labelled the study key's hash "study identity (source_sha256)", the
    name the ACF gives the source bundle's hash (`[kernel] source_sha256`), a different hash. A real
    study's report now shows the ACF's bundle hash as "source bundle sha256", and no view names the
    study key source_sha256."""
    from compileiq.results import acf

    url = f"sqlite:///{tmp_path}/t.db"
    done = run_cli(["tune", str(REDUCTION), "--budget", "2", "--workers", "local", "--db", url,
                    "--out", "r.acf.toml"], tmp_path)
    assert done.returncode == 0, done.describe()
    bundle = acf.read(tmp_path / "r.acf.toml").source_sha256
    store = Store.open(url)
    study = store.list_studies()[0]
    store.close()
    assert study.key.source_sha256 != bundle  # two hashes: the views must keep them apart
    md = run_cli(["report", study.name, "--db", url, "--format", "md", "-o", "-"], tmp_path)
    html = run_cli(["report", study.name, "--db", url, "-o", "r.html"], tmp_path)
    assert md.returncode == 0 and html.returncode == 0, (md.describe(), html.describe())
    page = (tmp_path / "r.html").read_text()
    assert f"| source bundle sha256 | {bundle} |" in md.stdout, md.stdout
    assert f"| study key (sources + flags + tune.toml + shipped settings) | {study.key.source_sha256} |" in md.stdout
    assert f"<td>source bundle sha256</td><td>{bundle}</td>" in page
    for text in (md.stdout, page):
        assert "source_sha256" not in text and "study identity" not in text


def test_a_markdown_report_shows_the_choices_registers_spills_and_occupancy_against_the_baseline(tmp_path):
    """User 4: the markdown report of an `instructions` study gave the instruction counts alone, while
    the HTML report and `show --json` knew the choice's registers, spills and occupancy against the
    baseline's: both reports now show the one evidence table (`page.evidence_rows`)."""
    url = f"sqlite:///{tmp_path}/t.db"
    store = Store.open(url)
    study = store.get_or_create_study(_key(objective="instructions"), "inst")
    rows = [({}, 500.0, {"spill_bytes": 16, "registers": 64, "occupancy": 0.5}),
            ({"ptxas.maxrregcount": 40}, 450.0, {"spill_bytes": 0, "registers": 40, "occupancy": 0.75})]
    for number, (config, value, metrics) in enumerate(rows):
        trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True), config)], "test")[0]
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=value, reason=None,
                           metrics={**metrics, "instructions": int(value), "stack_bytes": 0},
                           code_hash=f"{number:064d}", compile_seconds=0.1)
    store.close()
    shown = json.loads(run_cli(["show", "inst", "--json", "--db", url], tmp_path).stdout)
    metrics = {t["number"]: t["metrics"] for t in shown["trials"]}
    md = run_cli(["report", "inst", "--db", url, "--format", "md", "-o", "-"], tmp_path)
    assert md.returncode == 0, md.describe()
    header = next(line for line in md.stdout.splitlines() if "| spill_bytes | registers | occupancy |" in line)
    assert header.startswith("|  | instructions (static estimate"), header
    for label, number in (("baseline", 0), (f"chosen #{shown['study']['chosen']}", shown["study"]["chosen"])):
        m = metrics[number]
        assert (f"| {label} | {m['instructions']} | {m['spill_bytes']} | {m['registers']} | {m['occupancy']} |"
                in md.stdout), md.stdout
