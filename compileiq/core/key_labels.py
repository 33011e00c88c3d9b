"""How every view names a study key's fields, and the source bundle's hash beside them.

Two hashes are easily taken for each other. A study key's ``source_sha256`` is the study's key: the
sources with the flags, tune.toml's settings and a shipped build's settings, so that two studies of
one unchanged file differ in it when those differ. An ACF's ``[kernel] source_sha256`` is the
source bundle's hash alone (the kernel's file and its headers). The report, its markdown and
``report --compare`` name the first "study key (...)" and the second "source bundle sha256", from
these labels, so that no view shows the study key under the name the ACF gives the bundle's hash.
"""

from __future__ import annotations

STUDY_KEY = "study key (sources + flags + tune.toml + shipped settings)"
SOURCE_BUNDLE = "source bundle sha256"  # the ACF's [kernel] source_sha256
KERNEL_PATH = "kernel path (as its run recorded it)"  # the study key's kernel is the file's name alone

KEY_LABELS = {
    "kernel": "kernel", "source_sha256": STUDY_KEY, "space_id": "search space", "space_sha256": "search space sha256",
    "toolchain": "toolchain", "arch": "arch", "evaluator": "evaluator", "objective": "objective",
}  # fmt: skip


def key_label(field: str) -> str:
    """A StudyKey field as people read it."""
    return KEY_LABELS.get(field, field)
