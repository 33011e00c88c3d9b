"""The baseline trial: the build a run is held to (the compiler's defaults, or the settings of the
build that ships). A kernel that does not build that way stops the run with its one error line;
a run that ends without it finished writes no ACF, since an ACF needs its evidence."""

from __future__ import annotations

from collections.abc import Sequence

from compileiq.core.errors import CompileIQError, UsageError
from compileiq.core.records import Trial, TrialState, first_line
from compileiq.evaluate import eligibility
from compileiq.evaluate.metrics import NO_ENTRY, NO_KERNEL, NO_LAUNCHED_KERNEL
from compileiq.source.spec import KernelSpec, SourceBundle
from compileiq.tuning.build_hints import build_hint


class BaselineError(CompileIQError):
    """The kernel does not build with the compiler's default settings."""


class NamingError(BaselineError, UsageError):
    """The kernel builds, but tune.toml names a kernel the build does not have (bad input: exit 2)."""


class UnfinishedBaseline(CompileIQError):
    """The run ended without a finished baseline (another tuner still holds it): no ACF."""


def check_baseline(trials: Sequence[Trial], key: str, kernel: KernelSpec, bundle: SourceBundle) -> None:
    """BaselineError if the baseline (config `key`) is among `trials` and failed for good."""
    for trial in trials:
        if trial.config_key == key and trial.state is TrialState.FAILED and not trial.retryable:
            reason = (trial.reason or "unknown error").strip().splitlines()[0]  # the error line
            name = kernel.source.name
            hint = build_hint(reason, bundle, kernel)
            if NO_KERNEL in reason:  # it built, with no kernel in it
                raise BaselineError(f"{name}: {reason}{hint}")
            if NO_LAUNCHED_KERNEL in reason or NO_ENTRY in reason:  # it built: tune.toml is at fault
                raise NamingError(f"{name}: tune.toml entries: {reason}" if NO_ENTRY in reason else f"{name}: {reason}")
            shipped = kernel.shipped
            which = ("default settings" if shipped is None else f"your build's settings ({shipped.origin})"
                     if shipped.settings else f"your build ({shipped.origin})")
            raise BaselineError(f"{name} does not build with {which}: {reason}{hint}")


def reference(trials: Sequence[Trial], key: str, objective: str,
              against: str = eligibility.DEFAULTS) -> eligibility.Reference | None:
    """The static rules' reference: the baseline's result when it is complete, else None."""
    found = next((t for t in trials if t.config_key == key and t.state is TrialState.COMPLETE), None)
    return eligibility.Reference.of(found, objective, against) if found is not None else None


def finished_baseline(trials: Sequence[Trial], key: str) -> Trial:
    """The baseline trial, complete; else UnfinishedBaseline (an ACF needs its evidence)."""
    found = next((t for t in trials if t.config_key == key), None)
    if found is not None and found.state is TrialState.COMPLETE and found.value is not None:
        return found
    if found is not None and found.state is TrialState.RUNNING:
        raise UnfinishedBaseline(
            f"the baseline (trial #{found.number}) is still being evaluated by another tuner "
            f"({found.worker}); no ACF was written: rerun when it has finished"
        )
    reason = first_line(found.reason, None, "no reason recorded") if found is not None else "never claimed"
    raise UnfinishedBaseline(f"the baseline was not evaluated ({reason}); no ACF was written: rerun")
