"""A build as the build cache holds it (`BuildRecord`) and back: what a recorded row may serve."""

from __future__ import annotations

from compileiq.build.compile import Build, BuildStatus, EntryResources
from compileiq.build.linkage import stable_name
from compileiq.core.records import BuildRecord


def build_record(key: str, build: Build, ptx_key: str | None = None) -> BuildRecord:
    entries = [vars(entry) for entry in build.entries]
    metrics = {"status": build.status.value, "entries": entries}
    return BuildRecord(key, build.ok, build.message, metrics, build.code_hash, build.seconds, ptx_key)


def deterministic(record: BuildRecord) -> bool:
    """Only outcomes that the same inputs repeat are served from the cache (older versions
    cached timeouts, and builds whose names of internal linkage carry the hash of their scratch
    folder's path, with a code hash over those names: those are compiled again)."""
    status = record.metrics.get("status", "ok" if record.ok else "compile_error")
    entries = record.metrics.get("entries", [])
    scratch_named = isinstance(entries, list) and any(
        isinstance(e, dict) and isinstance(e.get("name"), str) and stable_name(e["name"]) != e["name"] for e in entries)
    return status in (BuildStatus.OK.value, BuildStatus.COMPILE_ERROR.value) and not scratch_named


def build_from_record(record: BuildRecord) -> Build:
    entries = tuple(EntryResources(**entry) for entry in record.metrics.get("entries", []))
    status = BuildStatus(record.metrics.get("status", "ok" if record.ok else "compile_error"))
    return Build(status, record.message, entries, record.code_hash, b"", record.seconds)
