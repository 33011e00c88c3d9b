"""The environment compileiq's compilers run in: this process's, less the variables through which
nvcc adds flags to every invocation (NVCC_PREPEND_FLAGS, NVCC_APPEND_FLAGS) or picks its host
compiler (NVCC_CCBIN), which also preprocesses the device code: a wrapper there can force-include
a header into every variant. What they add is in no ACF: the evidence recorded would not be what
the ACF's flags build, and a gate run with the same variable set would pass what a build without
it fails."""

from __future__ import annotations

import os
from collections.abc import Mapping

FLAG_VARIABLES = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
HOST_COMPILER = "NVCC_CCBIN"
IGNORED = (*FLAG_VARIABLES, HOST_COMPILER)


def for_tools(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` without the variables nvcc would add flags or take its host compiler from."""
    return {name: value for name, value in environment.items() if name not in IGNORED}


def ignored_note(environment: Mapping[str, str] | None = None) -> str | None:
    """One `note:` line naming the variables set here (their values are not shown), or None."""
    found = [name for name in IGNORED if (environment if environment is not None else os.environ).get(name, "").strip()]
    if not found:
        return None
    names = " and ".join(found)
    reasons = []
    if set(found) & set(FLAG_VARIABLES):
        reasons.append("with the recorded flags alone (nvcc would add these to every compile, flags no "
                       "ACF records); put flags the code needs in tune.toml's nvcc_flags")
    if HOST_COMPILER in found:
        reasons.append("with nvcc's default host compiler (NVCC_CCBIN picks another for every compile, and "
                       "it preprocesses the device code too; no ACF records it)")
    return f"note: {names} {'is' if len(found) == 1 else 'are'} set and ignored: compileiq builds {'; and '.join(reasons)}"
