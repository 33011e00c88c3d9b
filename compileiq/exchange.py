"""Move a study between databases: `compileiq db export` / `compileiq db import`.

An export file is JSON (gzip-compressed when its name ends in ``.gz``)::

    {"format": "compileiq-study", "version": 1, "sha256": "<hex>", "payload": {...}}

``sha256`` is taken over the payload's canonical JSON (sorted keys, no spaces), so a truncated,
edited or damaged file is refused before anything is written. The payload holds the study's name
and key, all its trials, and the builds and measurements of their machine code. Importing goes
through one store transaction (:meth:`Store.import_study`): it merges or changes nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
import zlib
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from compileiq.errors import UsageError
from compileiq.records import (
    BuildRecord,
    ImportSummary,
    Measurement,
    StudyExport,
    StudyKey,
    Trial,
    TrialState,
)
from compileiq.space import Config, SpaceError
from compileiq.store import Store

FORMAT = "compileiq-study"
VERSION = 1
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class ExportSummary:
    study: str
    path: Path
    trials: int
    builds: int
    measurements: int


def export_to_file(url: str, study: str, path: Path) -> ExportSummary:
    """Write study ``study`` (name or id) of the database at ``url`` to ``path``."""
    store = Store.open(url)
    try:
        export = store.export_study(study)
    finally:
        store.close()
    write(path, export)
    return ExportSummary(export.name, path, len(export.trials), len(export.builds), len(export.measurements))


def import_from_file(url: str, path: Path) -> ImportSummary:
    """Merge the study in ``path`` into the database at ``url`` (the file is checked first)."""
    export = read(path)
    store = Store.open(url)
    try:
        return store.import_study(export)
    finally:
        store.close()


def write(path: Path, export: StudyExport) -> None:
    """Atomically write ``export`` to ``path`` (gzip when the name ends in .gz)."""
    payload = _payload(export)
    document = {"format": FORMAT, "version": VERSION, "sha256": _checksum(payload), "payload": payload}
    data = json.dumps(document, indent=1, sort_keys=True).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None


def read(path: Path) -> StudyExport:
    """The export in ``path``; UsageError (one line) if it is unreadable, damaged or foreign."""
    document = _document(path)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UsageError(f"{path}: not a compileiq study export")
    if document.get("version") != VERSION:
        raise UsageError(
            f"{path}: export version {document.get('version')!r} is not supported "
            f"(this compileiq reads version {VERSION})"
        )
    payload = document.get("payload")
    if not isinstance(payload, dict) or document.get("sha256") != _checksum(payload):
        raise UsageError(f"{path}: checksum mismatch: the file was changed or damaged after export")
    try:
        return _export(payload)
    except (KeyError, TypeError, ValueError, AttributeError, SpaceError) as error:
        raise UsageError(f"{path}: malformed export: {type(error).__name__}: {error}") from None


def _document(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        if data.startswith(_GZIP_MAGIC):
            data = gzip.decompress(data)
        return json.loads(data)
    except (OSError, EOFError, zlib.error) as error:
        raise UsageError(f"{path}: damaged or truncated gzip data ({error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path}: not a compileiq study export (not JSON: {error})") from None


def _checksum(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _payload(export: StudyExport) -> dict[str, Any]:
    return {
        "study": {"name": export.name, "key": asdict(export.key)},
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
    study = payload["study"]
    return StudyExport(
        name=_text(study["name"]),
        key=StudyKey(**{f.name: _text(study["key"][f.name]) for f in fields(StudyKey)}),
        trials=tuple(_trial(values) for values in payload["trials"]),
        builds=tuple(BuildRecord(**values) for values in payload["builds"]),
        measurements=tuple(_measurement(values) for values in payload["measurements"]),
    )


def _trial(values: dict[str, Any]) -> Trial:
    config = Config.of(values["config"])
    if config.key != values["config_key"]:
        raise ValueError(f"trial {values.get('number')}: config_key does not match its config")
    finished = values["finished_at"]
    fixed = dict(values, id=0, study_id=0, config=config.as_dict(), state=TrialState(values["state"]))
    fixed.update(started_at=datetime.fromisoformat(values["started_at"]))
    fixed.update(finished_at=datetime.fromisoformat(finished) if finished else None)
    return Trial(**fixed)


def _measurement(values: dict[str, Any]) -> Measurement:
    samples, clocks = (tuple(float(v) for v in values[name]) for name in ("samples", "clocks"))
    return Measurement(**{**values, "samples": samples, "clocks": clocks})


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value
