"""A build as the build cache holds it (`BuildRecord`) and back: what a recorded row may serve."""

from __future__ import annotations

from compileiq.build.compile import Build, BuildStatus, EntryResources
from compileiq.core.records import BuildRecord


def build_record(key: str, build: Build, ptx_key: str | None = None) -> BuildRecord:
    entries = [vars(entry) for entry in build.entries]
    metrics = {"status": build.status.value, "entries": entries}
    return BuildRecord(key, build.ok, build.message, metrics, build.code_hash, build.seconds, ptx_key)


def deterministic(record: BuildRecord) -> bool:
    """Only outcomes that the same inputs repeat are served from the cache (older versions
    cached timeouts: those are compiled again)."""
    status = record.metrics.get("status", "ok" if record.ok else "compile_error")
    return status in (BuildStatus.OK.value, BuildStatus.COMPILE_ERROR.value)


def build_from_record(record: BuildRecord) -> Build:
    entries = tuple(EntryResources(**entry) for entry in record.metrics.get("entries", []))
    status = BuildStatus(record.metrics.get("status", "ok" if record.ok else "compile_error"))
    return Build(status, record.message, entries, record.code_hash, b"", record.seconds)
