"""Move a study between databases: `compileiq db export` / `compileiq db import`.

An export file is JSON (gzip-compressed when its name ends in ``.gz``)::

    {"format": "compileiq-study", "version": 1, "sha256": "<hex>", "payload": {...}}

``sha256`` is taken over the payload's canonical JSON (sorted keys, no spaces), so a truncated or
damaged file (or one edited without recomputing it) is refused before anything is written. It is
no signature: anyone who edits a file can recompute it, so what a file says is checked as any row
is (`trust`), and its pick rule only names the rule its views replay, said so (`results.explain`). The payload holds the study's name
and key, what its latest deciding run recorded of what it started from (its kernel's path, base
flags and sources' hashes: `transfer.carried`), all its trials, and the builds and measurements of
their machine code. Importing goes
through one store transaction (:meth:`Store.import_study`): it merges or changes nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.file_sniff import EXPORT
from compileiq.core.metric_ranges import MAX_PICK_RULE
from compileiq.core.output_file import check_report_target, not_regular, write_atomically
from compileiq.core.records import (
    BuildRecord,
    ImportSummary,
    Measurement,
    StudyExport,
    StudyKey,
    Trial,
    TrialState,
)
from compileiq.core.space import Config, SpaceError
from compileiq.core.text import printable
from compileiq.store import Store, transfer, trust

FORMAT = "compileiq-study"
VERSION = 2  # 2: each trial says why it was built (its purpose); 1 (every trial a search trial) still reads
READABLE_VERSIONS = (1, VERSION)
MAX_BYTES = 256 * 2**20  # an export (after gzip) larger than this is refused, not inflated
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 2**20


@dataclass(frozen=True)
class ExportSummary:
    study: str
    path: Path
    trials: int
    builds: int
    measurements: int


def export_to_file(url: str, study: str, path: Path) -> ExportSummary:
    """Write study ``study`` (name or id) of the database at ``url`` to ``path``."""
    if path != STDOUT:  # a path that may not be written stops before the database is opened
        check_report_target(path, EXPORT)
    store = Store.open(url, create=False)
    try:
        export = store.export_study(study)
    finally:
        store.close()
    write(path, export)
    return ExportSummary(export.name, path, len(export.trials), len(export.builds), len(export.measurements))


def import_from_file(url: str, path: Path) -> ImportSummary:
    """Merge the study in ``path`` into the database at ``url`` (the file is checked first; a
    row that does not fit the study's search space or is malformed is rejected, and counted; a
    file whose every trial is rejected is refused: `Store.import_study`)."""
    export = read(path)
    store = Store.open(url)
    try:
        return replace(store.import_study(export), rejected=export.rejected)
    finally:
        store.close()


STDOUT = Path("-")


def write(path: Path, export: StudyExport) -> None:
    """Atomically write ``export`` to ``path`` (gzip when the name ends in .gz; ``-``: stdout)."""
    payload = _payload(export)
    document = {"format": FORMAT, "version": VERSION, "sha256": _checksum(None, payload), "payload": payload}
    data = json.dumps(document, indent=1, sort_keys=True).encode()
    if path == STDOUT:
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.flush()
        return
    check_report_target(path, EXPORT)  # only an older export (or an empty file), never the database itself
    write_atomically(path, gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)


def read(path: Path) -> StudyExport:
    """The export in ``path``; UsageError (one line) if it is unreadable, damaged or foreign."""
    document = _document(path)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UsageError(f"{path}: not a compileiq study export")
    version = document.get("version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise UsageError(
            f"{path}: export version {version!r} is not supported "
            f"(this compileiq reads versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    payload = document.get("payload")
    if not isinstance(payload, dict) or document.get("sha256") != _checksum(path, payload):
        raise UsageError(f"{path}: checksum mismatch: the file was damaged, truncated or changed after export")
    try:
        export = _export(payload)
    except (KeyError, TypeError, ValueError, AttributeError, SpaceError) as error:
        raise UsageError(f"{path}: malformed export: {type(error).__name__}: {error}") from None
    if problem := trust.key_problem(export.key):  # nothing is imported from it
        raise UsageError(f"{path}: refused: study {printable(export.name)[:80]!r}: {problem}")
    return export


def _document(path: Path) -> Any:
    data = _contents(path)
    try:
        return json.loads(data)
    except RecursionError:
        raise UsageError(f"{path}: not a compileiq study export (JSON nested too deeply)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path}: not a compileiq study export (not JSON: {error})") from None
    except ValueError:  # Python refuses to read an integer of more than 4300 digits: no export holds one
        raise UsageError(f"{path}: not a compileiq study export (a number of more than 4300 digits)") from None


def _contents(path: Path) -> bytes:
    """The file's bytes (``-``: standard input, as `db export -o -` writes it), gunzipped when gzip;
    at most MAX_BYTES either way."""
    try:
        if path == STDOUT:
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        elif kind := not_regular(path):  # never opened: a named pipe would block until a writer came
            pipe = " (to import from a pipe: ... | compileiq db import -)" if kind == "a named pipe" else ""
            raise UsageError(f"cannot read {path}: it is {kind}, not a regular file{pipe}")
        else:
            with path.open("rb") as stream:
                data = stream.read(MAX_BYTES + 1)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    if data.startswith(_GZIP_MAGIC):
        data = _gunzip(path, data)
    if len(data) > MAX_BYTES:
        raise UsageError(f"{path}: larger than {MAX_BYTES // 2**20} MiB; not an export this compileiq reads")
    return data


def _gunzip(path: Path, data: bytes) -> bytes:
    """Inflate chunk by chunk, stopping past MAX_BYTES (a small file may inflate to gigabytes)."""
    inflater = zlib.decompressobj(wbits=31)
    parts, size, rest = [], 0, data
    try:
        while not inflater.eof and size <= MAX_BYTES:
            part = inflater.decompress(rest, _CHUNK)
            rest = inflater.unconsumed_tail
            if not part and not rest:
                break  # the input ended before the end of the stream
            parts.append(part)
            size += len(part)
        if size > MAX_BYTES:
            raise UsageError(f"{path}: inflates past {MAX_BYTES // 2**20} MiB; refused before reading further")
        if not inflater.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
    except (zlib.error, EOFError) as error:
        raise UsageError(f"{path}: damaged or truncated gzip data ({error})") from None
    if inflater.unused_data.strip(b"\0"):
        raise UsageError(f"{path}: data after the gzip stream; not an export this compileiq wrote")
    return b"".join(parts)


def _checksum(path: Path | None, payload: Any) -> str:
    try:
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    except (RecursionError, ValueError) as error:
        raise UsageError(f"{path}: not a compileiq study export ({error})") from None
    return hashlib.sha256(text.encode()).hexdigest()


def _payload(export: StudyExport) -> dict[str, Any]:
    return {
        "study": {"name": export.name, "key": asdict(export.key),
                  **({"pick": export.pick} if export.pick is not None else {}),
                  **({"decision": export.recorded} if export.recorded else {})},
        "trials": [_trial_json(trial) for trial in export.trials],
        "builds": [asdict(build) for build in export.builds],
        "measurements": [asdict(m) for m in export.measurements],
    }


def _trial_json(trial: Trial) -> dict[str, Any]:
    values = asdict(trial)
    for name in ("id", "study_id"):
        del values[name]
    values.update(state=trial.state.value, started_at=trial.started_at.isoformat())
    values.update(finished_at=trial.finished_at.isoformat() if trial.finished_at else None)
    return values


def _export(payload: dict[str, Any]) -> StudyExport:
    """The payload as an export; each row that does not fit is left out with its reason."""
    study = payload["study"]
    key = StudyKey(**{f.name: _text(study["key"][f.name]) for f in fields(StudyKey)})
    rejected: list[str] = []
    seen: set[str] = set()
    one = trust.ExportStudy(key)  # its parameters and space, decided by its first trial: once per study
    trials = _rows(payload["trials"], "trial", lambda v: _trial(v, key, seen, one), rejected)
    builds = _rows(payload["builds"], "build", _build, rejected)
    measurements = _rows(payload["measurements"], "measurement", _measurement, rejected)
    pick = study.get("pick")  # checked by every view that reads it (`results.recorded_decision.recorded_pick`)
    pick = pick if isinstance(pick, str) and len(pick) <= MAX_PICK_RULE else None
    recorded = transfer.carried(study.get("decision"))  # bounded here; checked by every view that reads it
    return StudyExport(_text(study["name"]), key, trials, builds, measurements, tuple(rejected), pick, recorded)


def _rows(items: list[Any], kind: str, parse: Callable[[dict[str, Any]], Any], rejected: list[str]) -> tuple[Any, ...]:
    if not isinstance(items, list):
        raise TypeError(f"{kind}s: expected a list")
    kept = []
    for index, values in enumerate(items):
        try:
            kept.append(parse(values))
        except (KeyError, TypeError, ValueError, AttributeError, SpaceError, RecursionError, OverflowError) as error:
            why = f"missing field {error}" if isinstance(error, KeyError) else str(error)
            number = values.get("number") if isinstance(values, dict) else None
            which = f"{kind} #{number} (row {index + 1} of the file)" if type(number) is int else \
                f"{kind} at row {index + 1} of the file"
            rejected.append(" ".join(f"{which}: {why[:200]}".split()))
    return tuple(kept)


def _trial(values: dict[str, Any], key: StudyKey, seen: set[str], study: trust.ExportStudy) -> Trial:
    finished = values["finished_at"]
    fixed = dict(values, id=0, study_id=0, state=TrialState(values["state"]))
    fixed.update(started_at=_time(values["started_at"]), finished_at=_time(finished) if finished else None)
    trial = Trial(**fixed)
    if problem := trust.check_in_export(trial, key, study):
        raise ValueError(problem)
    if trial.config_key in seen:
        raise ValueError("a second trial of the same config")
    seen.add(trial.config_key)
    return replace(trial, config=Config.of(trial.config).as_dict())


def _build(values: dict[str, Any]) -> BuildRecord:
    build = BuildRecord(**values)
    if problem := trust.build_problem(build):
        raise ValueError(problem)
    return build


def _time(text: Any) -> datetime:
    return datetime.fromisoformat(_text(text))


def _measurement(values: dict[str, Any]) -> Measurement:
    samples, clocks = (tuple(float(v) for v in values[name]) for name in ("samples", "clocks"))
    measurement = Measurement(**{**values, "samples": samples, "clocks": clocks})
    if problem := trust.measurement_problem(measurement):
        raise ValueError(problem)
    return measurement


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value
