"""Writing an ACF: what the tuner knows (`AcfContent`), the TOML document rendered from it, and the
atomic write that keeps the file there where it holds this choice already or may not be replaced.

What is written is read back first (`acf_read.parse`): an ACF this writes is one a reader accepts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from compileiq.core.output_file import write_atomically
from compileiq.core.space import Config, SearchSpace, SpaceError
from compileiq.core.space_files import load_space
from compileiq.core.version import __version__
from compileiq.results import acf_replace, acf_rerun
from compileiq.results.acf_checks import AcfError
from compileiq.results.acf_read import FORMAT_VERSION, argv_of, parse, settled


@dataclass(frozen=True)
class AcfContent:
    """What the tuner knows when it writes an ACF."""

    kernel: str
    source_name: str
    source_path: str  # relative to the ACF's folder (a clone elsewhere finds it), for `gate`
    source_sha256: str
    arch: str
    nvcc_version: str
    ptxas_version: str
    toolchain_build: str
    space: SearchSpace
    config: Config
    fixed_defines: tuple[str, ...]
    objective: dict[str, Any]
    evidence: dict[str, Any]
    provenance: dict[str, Any]
    base_flags: tuple[str, ...] = ()  # validated nvcc_flags, canonical spelling
    settings_sha256: str = ""  # the build- and score-relevant tune.toml settings
    settings_identities: tuple[str, ...] = ()  # each identity of them (`KernelSpec.settings_sha256s`), for `acf_replace`
    restrictions: tuple[str, ...] = ()  # tune.toml's [tune] restrictions
    entries: tuple[str, ...] = ()  # tune.toml's entries: the kernels the objective scored (none: every kernel; recorded as [])
    baseline: dict[str, Any] | None = None  # [baseline]: the shipped build (--compile-commands)
    mode: str = "harness"  # how a timed run reports its time (tune.toml's mode, or --program)
    metric_regex: str | None = None  # program mode: the time's pattern


def render(content: AcfContent) -> dict[str, Any]:
    """The ACF document as a TOML-ready dict."""
    space, config = content.space, content.config
    defaults = space.default_config()
    controls = {
        name: value
        for name, value in config.items
        if name.startswith("define.") or value != defaults[name] or space.parameter(name).render_default
    }  # a setting held at the shipped build's value renders at its default too (`space_choice`)
    shipped = {"baseline": content.baseline} if content.baseline is not None else {}
    # rendered as a reader renders them (`settled`), not in the order the run searched its settings
    macros = [p.name.removeprefix("define.") for p in space.parameters if p.name.startswith("define.")]
    config, full = settled(load_space(content.nvcc_version), controls, macros)
    return {
        "format": FORMAT_VERSION,
        "kernel": {"name": content.kernel, "source": content.source_name, "path": content.source_path,
                   "source_sha256": content.source_sha256, "settings_sha256": content.settings_sha256,
                   "arch": content.arch, **({"restrictions": list(content.restrictions)} if content.restrictions else {}),
                   "entries": list(content.entries),  # [] every kernel; absent only in older ACFs
                   "mode": content.mode, **({"metric_regex": content.metric_regex} if content.metric_regex else {})},
        "base": {"nvcc_flags": list(content.base_flags)},
        "toolchain": {"nvcc": content.nvcc_version, "ptxas": content.ptxas_version,
                      "build": content.toolchain_build, "search_space": space.id,
                      "search_space_sha256": space.sha256},
        "controls": controls,
        "args": {"frontend": list(full.frontend_args(config)),
                 "ptxas": list(full.ptxas_args(config)),
                 "defines": list(content.fixed_defines),
                 "argv": list(argv_of(full, config, content.fixed_defines))},
        "objective": content.objective,
        "evidence": content.evidence,
        "provenance": {"written_at": acf_rerun.written_at_now(),
                       "compileiq": __version__, **content.provenance},
    } | shipped  # fmt: skip


def write(path: Path, content: AcfContent, force: bool = False, inputs: tuple[tuple[str, Path], ...] = ()) -> Path:
    """Write the ACF (`write_or_keep`); its path."""
    write_or_keep(path, content, force, inputs)
    return path


def write_or_keep(path: Path, content: AcfContent, force: bool = False,
                  inputs: tuple[tuple[str, Path], ...] = (), note: Callable[[str], None] | None = None,
                  facts: acf_rerun.StudyFacts | None = None) -> bool:
    """Write atomically (temporary file + rename); an existing ACF is replaced only by one that reads
    back valid and, unless ``force``, holds as much evidence, never one of the run's `inputs` or a database
    (`acf_replace`: ReplaceError), and left byte for byte where it holds this choice already (`acf_rerun`).
    A symbolic link, or anything but a regular file, is refused (OutputFileError); folder links are followed.
    True where the file held this choice already and was kept (what `tune` reports as "unchanged").
    `note`: told where the file there claims what is false (`acf_replace.false_count`); `facts`: what the
    database says of the study, which what the file keeps must agree with (`acf_rerun.StudyFacts`)."""
    try:
        document = render(content)
    except SpaceError as error:  # settings the compiler's space does not hold: a reader would refuse them too
        raise AcfError(f"not writing {path}: {error}") from None
    text = "# compileiq advanced-control file: review it like code.\n" + tomli_w.dumps(document)
    try:
        parse(path, text)
    except AcfError as error:
        raise AcfError(f"not writing {path}: the new ACF does not validate: {error}") from None
    false = acf_replace.check(path, acf_replace.held(document, path, content.settings_identities), force,
                              after_run=True, inputs=inputs)
    if false is not None and note is not None:
        note(f"the ACF {path}: {false}")
    if acf_rerun.unchanged(path, document, text, facts):
        return True
    write_atomically(path, text.encode("utf-8"))
    return False


def check_writable(path: Path) -> None:
    """AcfError unless an ACF can be written at ``path`` (checked before a run, not after it)."""
    if path.is_dir():
        raise AcfError(f"cannot write the ACF {path}: it is a directory; name a file, e.g. {path / 'kernel.acf.toml'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as error:
        raise AcfError(f"cannot write the ACF {path}: {error.strerror or error}") from None
