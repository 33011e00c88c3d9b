"""What a timed run measures: a variant's device code and the macros its program was built with.

Two variants with the same machine code are one variant to the static objectives, but not to a
clock: a tuned macro may reach only the host side of the measuring program (the threads per block
a launch asks for: Rodinia's gaussian), so the same code runs with another launch and takes another
time. The measurement cache, the executables kept for confirmation, screening's "each distinct code
once" and the finalists' "one per code" key on this instead of the code hash alone. A study without
tuned macros keys on the code hash as before (its cached measurements stay valid).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from compileiq.core.records import Trial


def timed_key(code_hash: str, config: Mapping[str, Any]) -> str:
    """The code hash, with the digest of the configuration's macro values where it has any."""
    macros = sorted((name, repr(value)) for name, value in config.items() if name.startswith("define."))
    if not macros:
        return code_hash
    # letters and digits only: the measurement cache (and an export's rows) hold hashes of that form
    return f"{code_hash}m{hashlib.sha256(json.dumps(macros).encode()).hexdigest()[:16]}"


def trial_timed_key(trial: Trial) -> str | None:
    """A recorded trial's `timed_key` (None: it has no machine code)."""
    return timed_key(trial.code_hash, trial.config) if trial.code_hash else None
