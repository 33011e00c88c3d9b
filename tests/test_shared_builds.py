"""ptxas never runs twice on the same PTX with the same flags: configurations that differ only in a
front-end setting that leaves the PTX unchanged share one build, in one run and across tuners
(tests/test_concurrency.py), and a claim of a build left by a tuner that died blocks nobody for
longer than the stale timeout."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, clean_env, compileiq_command, slow_toolchain

from compileiq.core.records import BuildRecord
from compileiq.core.toolchain import find_toolchain
from compileiq.store import Store

# Neither setting changes the PTX of TINY_KERNEL (no switch, nothing to vectorise): checked below
# with nvcc itself, so the test's premise is not taken on trust.
SAME_PTX = {"nvcc.jump_table_density": ("--jump-table-density=101", "--jump-table-density=0"),
            "nvcc.extra_device_vectorization": ("", "--extra-device-vectorization")}
OPT_LEVELS = 4  # ptxas -O0..-O3: the distinct ptxas flags of an --only ...,ptxas.opt_level space


def _ptx(folder: Path, flag: str) -> bytes:
    out = folder / "probe.ptx"
    subprocess.run([find_toolchain().nvcc, "-arch=sm_90", "-ptx", *([flag] if flag else []), str(folder / "scale.cu"),
                    "-o", str(out)], check=True, capture_output=True)  # fmt: skip
    return out.read_bytes()


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    return tmp_path / "scale.cu"


def _tune(kernel: Path, url: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    args = [compileiq_command(), "tune", str(kernel), "--db", url, "--workers", "local", "--json", "--no-simplify",
            "--out", str(kernel.parent / f"{time.monotonic_ns()}.acf.toml"), *extra]  # fmt: skip
    return subprocess.Popen(args, cwd=kernel.parent, env=clean_env(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _report(process: subprocess.Popen[str], timeout: float = 120) -> dict:
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"exit {process.returncode}\n{stderr}\n{stdout}"
    return json.loads(stdout)


@pytest.mark.parametrize("setting", sorted(SAME_PTX))
def test_one_run_runs_ptxas_once_per_distinct_ptx_and_flags(tiny: Path, setting: str) -> None:
    assert len({_ptx(tiny.parent, flag) for flag in SAME_PTX[setting]}) == 1, "the premise: the PTX is unchanged"
    space = f"{setting},ptxas.opt_level"
    report = _report(_tune(tiny, f"sqlite:///{tiny.parent / 't.db'}", "--only", space, "--strategy", "exhaustive",
                           "--budget", "100"))  # fmt: skip
    counters = report["counters"]
    assert report["exhausted"] and counters["new_trials"] > OPT_LEVELS  # several front ends were tried
    assert counters["ptxas_calls"] - counters["verify_ptxas_calls"] == OPT_LEVELS
    assert counters["shared_builds"] == counters["new_trials"] - OPT_LEVELS


def test_builds_recorded_by_another_run_are_used_by_their_ptx_and_what_the_acf_cites_is_still_rebuilt(
        tiny: Path) -> None:
    url = f"sqlite:///{tiny.parent / 't.db'}"
    exhaustive = ("--strategy", "exhaustive", "--budget", "100")
    _report(_tune(tiny, url, "--study", "first", "--only", "ptxas.opt_level", *exhaustive))
    report = _report(_tune(tiny, url, "--study", "second", "--only", "nvcc.extra_device_vectorization,ptxas.opt_level",
                           *exhaustive))  # fmt: skip
    counters = report["counters"]
    # without the flag: the first run's builds by configuration; with it: the same builds by PTX
    assert counters["build_cache_hits"] == OPT_LEVELS and counters["shared_builds"] == OPT_LEVELS
    assert counters["ptxas_calls"] == counters["verify_ptxas_calls"] >= 1  # only the ACF's rows, compiled again


def test_a_build_claim_of_a_tuner_that_died_is_taken_over_once_stale(tiny: Path) -> None:
    # The victim claims the build of its baseline (-O3 on the unchanged PTX), its ptxas sleeps 30 s,
    # and it is SIGKILLed mid-compile. The rescuer (another study: it needs none of the victim's
    # trials) needs the same build: the victim's process is gone from this host, so its claim is
    # taken at once (as its trials would be), and each (PTX, flags) pair is built once.
    url = f"sqlite:///{tiny.parent / 't.db'}"
    victim = _tune(tiny, url, "--study", "victim", "--only", "ptxas.opt_level", "--batch-size", "4",
                   "--budget", "4", env=slow_toolchain(tiny.parent / "slow", 30))  # fmt: skip
    deadline = time.monotonic() + 60
    while _claims(url) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _claims(url) >= 1, "the victim never claimed a build"
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    started = time.monotonic()
    rescuer = _tune(tiny, url, "--study", "rescuer", "--only", "nvcc.extra_device_vectorization,ptxas.opt_level",
                    "--strategy", "exhaustive", "--budget", "100")  # fmt: skip
    counters = _report(rescuer, timeout=90)["counters"]
    assert counters["ptxas_calls"] - counters["verify_ptxas_calls"] == OPT_LEVELS
    assert counters["new_trials"] == 2 * OPT_LEVELS and counters["shared_builds"] == OPT_LEVELS
    assert time.monotonic() - started < 60  # not the default stale timeout of 300 s
    assert _claims(url) == 0  # every claim ended with its build


def test_a_build_claim_of_a_tuner_elsewhere_is_waited_for_then_taken_over_once_stale(tiny: Path) -> None:
    # The claims of a tuner on another host (its process cannot be looked up) are left alone while
    # their heartbeat is fresh, and taken over once it is 3 s old (--stale-after 3).
    space = ("--only", "ptxas.opt_level", "--strategy", "exhaustive", "--budget", "100")
    first = tiny.parent / "first.db"
    _report(_tune(tiny, f"sqlite:///{first}", *space))
    store = Store.open(f"sqlite:///{first}")
    try:  # the PTX keys a run of this space needs, as the first run recorded them
        keys = {store.get_build(key).ptx_key for key in _build_keys(f"sqlite:///{first}")}
    finally:
        store.close()
    assert len(keys) == OPT_LEVELS and None not in keys
    url = f"sqlite:///{tiny.parent / 'second.db'}"
    started = time.monotonic()  # before the claim: a stall after it would shorten the wait measured
    store = Store.open(url)
    try:
        assert store.claim_builds(keys, "elsewhere.example:1", 300).mine == keys
    finally:
        store.close()
    counters = _report(_tune(tiny, url, *space, "--stale-after", "3"), timeout=90)["counters"]
    assert time.monotonic() - started > 3  # it waited for the claims to go stale
    assert counters["ptxas_calls"] - counters["verify_ptxas_calls"] == OPT_LEVELS
    assert _claims(url) == 0


def _build_keys(url: str) -> list[str]:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.exec_driver_sql("SELECT key FROM builds")]
    finally:
        engine.dispose()


def _claims(url: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("SELECT COUNT(*) FROM build_claims").scalar_one())
    except sa.exc.DBAPIError:
        return 0  # the schema is not there yet
    finally:
        engine.dispose()


# -- the claims themselves, through the store ------------------------------------------------------


def _record(key: str, ptx_key: str | None, metrics: dict | None = None) -> BuildRecord:
    return BuildRecord(key, True, "", metrics or {"status": "ok", "entries": []}, "c" * 64, 0.1, ptx_key)


def test_a_claim_holds_a_ptx_key_until_its_build_is_recorded(store_url: str) -> None:
    store = Store.open(store_url)
    try:
        first = store.claim_builds(["p" * 64], "a:1", stale_after_s=300)
        assert first.mine == {"p" * 64} and not first.built
        assert store.claim_builds(["p" * 64], "a:1", 300).mine == {"p" * 64}  # its own claim, again
        assert store.claim_builds(["p" * 64], "b:2", 300).held.keys() == {"p" * 64}  # another tuner waits
        store.put_build(_record("k" * 64, "p" * 64))  # recorded: the claim is done
        found = store.claim_builds(["p" * 64], "b:2", 300)
        assert found.built == {"p" * 64: _record("k" * 64, "p" * 64)} and not found.mine and not found.held
        store.claim_builds(["q" * 64], "a:1", 300)
        store.release_build_claims(["q" * 64], "b:2")  # not b's to release
        assert store.claim_builds(["q" * 64], "b:2", 300).held.keys() == {"q" * 64}
        store.release_build_claims(["q" * 64], "a:1")
        assert store.claim_builds(["q" * 64], "b:2", 300).mine == {"q" * 64}
    finally:
        store.close()


def test_a_stale_or_forged_claim_is_taken_over(store_url: str) -> None:
    import sqlalchemy as sa

    store = Store.open(store_url)
    try:
        store.claim_builds(["s" * 64, "f" * 64], "dead:1", stale_after_s=300)
        store.heartbeat_build_claims(["s" * 64], "dead:1")
        engine = sa.create_engine(store_url)
        with engine.begin() as conn:  # one claim beaten 10 minutes from now: forged, it would hold forever
            conn.execute(sa.text("UPDATE build_claims SET heartbeat_at = :t WHERE ptx_key = :k"),
                         {"t": "2999-01-01 00:00:00", "k": "f" * 64})
        engine.dispose()
        assert store.claim_builds(["f" * 64], "live:2", 300).mine == {"f" * 64}
        assert store.claim_builds(["s" * 64], "live:2", 300).held.keys() == {"s" * 64}
        time.sleep(1.5)
        assert store.claim_builds(["s" * 64], "live:2", 1).mine == {"s" * 64}
    finally:
        store.close()


def test_a_shared_build_row_is_checked_like_any_cached_build(store_url: str) -> None:
    warnings: list[str] = []
    store = Store.open(store_url, warn=warnings.append)
    try:
        store.put_build(_record("k" * 64, "p" * 64, metrics={"status": "ok", "entries": [{"name": "x"}]}))
        found = store.claim_builds(["p" * 64], "a:1", 300)
        assert not found.built and found.mine == {"p" * 64}  # a damaged row is never served
        assert any("cached build" in w for w in warnings)
        store.put_build(_record("t" * 64, "r" * 64, metrics={"status": "timeout", "entries": []}))
        assert store.claim_builds(["r" * 64], "a:1", 300).mine == {"r" * 64}  # a timeout is not an outcome
    finally:
        store.close()
