"""Which recorded study a run continues. Releases before 2026-12-06 named a shipped build's study
by every searched setting its command spells; now a -D at tune.toml's first value and a fast-math
twin (`--use_fast_math --ftz=true`) name the build they are (`KernelSpec.shipped_values`). A study
recorded under the identity the older code gave the same run is continued, not orphaned.

Without --study a run's study takes the first of its derived names (`derived_study_names`) that
holds a study of its identity, else the first no study holds: a study of another identity under
the default name (forged in a team database, or made by another build) moves it to a longer hash,
the same for every rerun of the build, with a note; it never stops the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from compileiq.core.records import Study, StudyKey
from compileiq.core.space import SearchSpace
from compileiq.core.toolchain import Toolchain
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.source.spec import SourceBundle
from compileiq.store import Store, StoreError, default_study_name, derived_study_names
from compileiq.tuning.request import TuneRequest, study_keys


def keys(request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain,
         evaluator: str) -> tuple[StudyKey, StudyKey | None]:
    """The run's study identity, and the one older releases gave it (None where the same)."""
    key, *older = study_keys(request, bundle, toolchain, evaluator)
    return key, older[0] if older else None


def legacy_study(store: Store, key: StudyKey, legacy: StudyKey | None, name: str | None) -> Study | None:
    """The study recorded under the older identity `legacy` that this run continues: the one
    named `name` (default: `legacy`'s default name) where it has that identity and (no name given)
    no study of `key` holds one of `key`'s derived names; None otherwise."""
    if legacy is None:
        return None
    if name is None and _own_study(store, key) is not None:
        return None
    found = store.study_named(name or default_study_name(legacy))
    return found if found is not None and found.key == legacy else None


def planned_name(store: Store, request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain,
                 evaluator: str) -> str:
    """The name of the study a run will record its trials in (`open_study`)."""
    key, legacy = keys(request, bundle, toolchain, evaluator)
    found = legacy_study(store, key, legacy, request.study_name)
    return found.name if found is not None else request.study_name or derived_name(store, key)


def derived_name(store: Store, key: StudyKey) -> str:
    """The name of `key`'s study without --study: the first derived name whose study has `key`,
    else the first no study holds; StoreError (one line) where studies of other keys hold them all."""
    own = _own_study(store, key)
    if own is not None:
        return own.name
    names = derived_study_names(key)
    free = [name for name in names if store.study_named(name) is None]
    if not free:
        raise StoreError(f"studies of another kernel source or settings hold every name derived for this build "
                         f"({', '.join(names)}); choose a study name with --study")
    return free[0]


def _own_study(store: Store, key: StudyKey) -> Study | None:
    """The study of `key` under the first of its derived names that holds one, or None."""
    for name in derived_study_names(key):
        found = store.study_named(name)
        if found is not None and found.key == key:
            return found
    return None


def open_study(store: Store, request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain, evaluator: str,
               note: Callable[[str], None]) -> Study:
    """The run's study: the one of its identity, created if missing, or the one recorded under
    the identity older releases gave it (`legacy_study`), with a one-line note."""
    key, legacy = keys(request, bundle, toolchain, evaluator)
    found = legacy_study(store, key, legacy, request.study_name)
    if found is None and request.study_name is None:
        name = derived_name(store, key)
        if name != default_study_name(key):
            held = "is" if store.study_named(default_study_name(key)) is not None else "was"
            note(f"note: study {name}: this build's default study name {default_study_name(key)} {held} held by a "
                 "study of another kernel source or settings (a shared database's rows are untrusted)")
        return store.get_or_create_study(key, name)
    if found is None:
        return store.get_or_create_study(key, request.study_name)
    note(f"note: continuing study {found.name}, recorded under this build's identity before 2026-12-06 "
         "(a -D at tune.toml's first value, or a flag --use_fast_math implies, is no longer part of it)")
    return found


Search = TypeVar("Search")


def on_recorded_space(store: Store, request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain,
                      search: Search) -> tuple[TuneRequest, Search | None, SearchSpace]:
    """A static run's request, searcher (None: the tuner starts one for the request) and space: on
    the space older releases searched (`TuneRequest.legacy_space`: with a shipped fast-math twin in
    it) where the study recorded there is the one this run continues, else as they are."""
    older = request.legacy_space
    if older is None or older.sha256 == request.space.sha256:
        return request, search, request.space
    key, _ = keys(request, bundle, toolchain, StaticEvaluator.kind)
    moved = replace(request, space=older)
    found = legacy_study(store, key, study_keys(moved, bundle, toolchain)[-1], request.study_name)
    if found is None:
        return request, search, request.space
    return replace(moved, study_name=found.name), None, older
