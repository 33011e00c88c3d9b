"""The kernel's own macros, which the gate holds an ACF's macros to.

An ACF carries two kinds: its fixed macros (`[args] defines`, tune.toml's `[defines]`: a problem
size, a feature switch, which make the program what it is) and its tuned ones (`define.X` controls,
one of tune.toml's `[tune.defines]` values each, allowed by its `[tune] restrictions`). Both are
untrusted text: the ACF reader can only check them against the ACF's own copy, which it may rewrite.
Here they are held to tune.toml as it is now:

- a fixed macro the ACF records that tune.toml does not give (or gives another value), or lacks, is
  a `stale-settings` finding naming it, as a base flag is (`kernel_settings.difference`); the ACF's
  choice and the baseline are both built with the kernel's own fixed macros, so that the evidence is
  judged on the program that ships, not the one the ACF names;
- a tuned macro tune.toml does not tune, or a value not among its values, is `stale-settings` too
  (tune.toml changed since the tuning, or the ACF was edited); the baseline builds tune.toml's
  macros only, never the ACF's (one the tuning left out, `--exclude`, is in neither build);
- controls that break tune.toml's restrictions are bad input, as the reader refuses an ACF whose
  controls break its own copy: such a configuration is not a valid build of the kernel at all.
"""

from __future__ import annotations

from pathlib import Path

from compileiq.gating.rules import BaseFlagDifference, Hit
from compileiq.results import acf as acf_file
from compileiq.source import restrictions
from compileiq.source.spec import KernelSpec

RULE = "stale-settings"


def fixed_difference(spec: KernelSpec, acf: acf_file.Acf) -> BaseFlagDifference:
    """The ACF's fixed macros (`args.defines`) against tune.toml's `[defines]`."""
    own = spec.fixed_define_args()
    extra = [d for d in acf.fixed_defines if d not in set(own)]
    missing = [d for d in own if d not in set(acf.fixed_defines)]
    return BaseFlagDifference(tuple(dict.fromkeys(extra)), tuple(dict.fromkeys(missing)))


def tuned_problems(spec: KernelSpec, acf: acf_file.Acf) -> list[tuple[str, str]]:
    """How the ACF's `define.X` controls depart from tune.toml's `[tune.defines]`: each as what the
    ACF records ("define.X = 3") and what tune.toml gives ("tune.toml's define.X: 1, 2, 4")."""
    tuned = dict(spec.tuned_defines)
    chosen = {k.removeprefix("define."): v for k, v in acf.controls.items() if k.startswith("define.")}
    return [(f"define.{name} = {value!r}", f"tune.toml tunes no define.{name}" if name not in tuned
             else f"tune.toml's define.{name}: {', '.join(map(repr, tuned[name]))}")
            for name, value in chosen.items() if name not in tuned or value not in tuned[name]]


def macro_hits(spec: KernelSpec, acf: acf_file.Acf, retune: str) -> list[Hit]:
    """`stale-settings` for an ACF whose macros are not the kernel's (see the module's text)."""
    hits = []
    if differ := fixed_difference(spec, acf):
        parts = [f"records {' '.join(differ.extra)}, which tune.toml's [defines] do not give"] * bool(differ.extra)
        parts += [f"lacks {' '.join(differ.missing)}, which they give"] * bool(differ.missing)
        hits.append(Hit(RULE, " ".join(differ.extra) or "-", " ".join(differ.missing) or "-",
                        f"the ACF's fixed macros (args.defines) are not the kernel's: it {' and '.join(parts)}; its "
                        "choice and the baseline are built with the kernel's own", retune))
    if problems := tuned_problems(spec, acf):  # the values once, in the recorded and measured columns
        names = ", ".join(recorded.split(" = ")[0] for recorded, _ in problems)
        hits.append(Hit(RULE, "; ".join(r for r, _ in problems), "; ".join(m for _, m in problems),
                        f"the ACF's tuned macros are not tune.toml's: {names} "
                        f"{'is' if len(problems) == 1 else 'are'} set to a value tune.toml's [tune.defines] does "
                        "not offer; the baseline builds tune.toml's values", retune))
    return hits


def restriction_problem(spec: KernelSpec, acf: acf_file.Acf) -> str:
    """Why the ACF's controls are not a valid configuration under tune.toml's `[tune] restrictions`
    ("" when they are, or tune.toml has none): the ACF's own copy is not what they are held to."""
    rules = restrictions.of_spec(spec)
    if rules is None:
        return ""
    chosen = {k: v for k, v in acf.controls.items() if k.startswith("define.")}
    if (broken := rules.first_broken(chosen)) is None:
        return ""
    shown = ", ".join(f"{k} = {v!r}" for k, v in chosen.items()) or "no tuned macro"
    return (f"{acf.path}: its controls ({shown}) {broken}, a restriction of the kernel's tune.toml: not a valid "
            "configuration of the kernel; re-tune it")


def flags_problem(acf: acf_file.Acf) -> str:
    """Why `flags` may not print the ACF's flags ("" when it may): its tuned macros held to the
    kernel's tune.toml as it is now (`tuned_problems`, `restriction_problem`), as the gate holds
    them. A value tune.toml does not offer, or a configuration its restrictions refuse, was never
    tuned (an edited ACF, or tune.toml changed since): the build would get settings no evidence is
    for. An ACF whose kernel is not beside it (a build folder holding the ACF alone) is printed as
    it validates: there is no tune.toml to hold it to."""
    from compileiq.source.kernel import load_spec

    source = Path(acf.source_from_here())
    if not any(k.startswith("define.") for k in acf.controls) or not source.is_file():
        return ""
    spec = load_spec(source, arch=acf.arch)
    if problems := tuned_problems(spec, acf):
        shown = "; ".join(f"{recorded} ({offered})" for recorded, offered in problems)
        return (f"{acf.path}: its tuned macros are not its kernel's tune.toml's ({shown}): not "
                "printed, no tuning chose them; re-tune the kernel, or restore the ACF that tune wrote")
    return restriction_problem(spec, acf)
