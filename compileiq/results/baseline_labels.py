"""How every view names a study's baseline (its first trial): the compiler's defaults, or the build
the project ships with the settings it sets (`baseline_label`, `baseline_settings`), and the
compiler's defaults of the study's space those are told from (`compiler_defaults`)."""

from __future__ import annotations

from typing import Any

from compileiq.core.records import Study, Trial
from compileiq.core.space import SpaceError
from compileiq.core.space_files import load_space
from compileiq.source.base_flags import CAPPED


def baseline_label(study: Study, baseline: Trial | None, origin: str | None = None) -> str:
    """How every view names the study's first trial: "baseline (defaults)" when it is the compiler
    defaults, else the build the project ships ("your build: compile_commands.json" where the run
    knows the file: then it is that build even where it sets no searched setting, its fixed flags
    such as nvcc's -maxrregcount being applied to it)."""
    if origin is None and (baseline is None or not shipped_values(study, baseline)):
        return "baseline (defaults)"
    return f"baseline (your build: {origin})" if origin else "baseline (your build)"


def baseline_settings(study: Study, baseline: Trial | None, origin: str | None = None) -> str:
    """The baseline in a few words, for a list of studies: "defaults", or the build as shipped
    with the settings it sets ("your build (compile_commands.json): ptxas.maxrregcount=24"), so
    that two studies of one file shipped with different flags are told apart."""
    label = baseline_label(study, baseline, origin).removeprefix("baseline (").removesuffix(")")
    if ": " in label:  # "your build: compile_commands.json"
        label = label.replace(": ", " (", 1) + ")"
    values = shipped_values(study, baseline) if baseline is not None else {}
    settings = ", ".join(f"{name}={json_text(value)}" for name, value in sorted(values.items()))
    return f"{label}: {settings}" if settings else label


def json_text(value: Any) -> str:
    """A setting's value as tune.toml and the flags spell it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def shipped_values(study: Study, baseline: Trial) -> dict[str, Any]:
    """The baseline's compiler settings that are not the compiler's defaults (the study's space)."""
    defaults = compiler_defaults(study)
    return {k: v for k, v in baseline.config.items() if k in defaults and defaults[k] != v}


def compiler_defaults(study: Study, register_cap: bool = True) -> dict[str, Any]:
    """The compiler's default of each setting of the study's space ({} where this install lacks
    that space); without nvcc's register cap setting unless ``register_cap`` (base flags holding a
    cap take it out of a space: `space_choice.without_capped`)."""
    version = study.key.space_id.removeprefix("nvcc-").partition("+")[0]
    try:
        defaults = load_space(version).default_config().as_dict()
    except SpaceError:  # a space this install does not have: no defaults to compare with
        return {}
    return {k: v for k, v in defaults.items() if register_cap or k != CAPPED}
