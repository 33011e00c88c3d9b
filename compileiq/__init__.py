"""compileiq: an open autotuner for nvcc/ptxas compiler settings of CUDA kernels."""

from compileiq.core import early_stop as _early_stop

if _early_stop.the_command():  # run as the command: a Ctrl-C from here on says one line (`early_stop`)
    _early_stop.take_over()

import os
from typing import Any

# The surrogate fits are small; a BLAS thread pool only competes with the parallel compilers
# (measured: a parallel nvcc doubled GP's fit time). Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from compileiq.core.version import __version__

# The Python API (compileiq.api), imported on first use so that `import compileiq` (and so every
# command, `compileiq flags` included) stays cheap.
_API = ("tune", "gate", "load_acf", "flags", "flag_notes", "TuneResult", "TrialRow", "FlagNotes")
__all__ = ["FlagNotes", "TrialRow", "TuneResult", "__version__", "flag_notes", "flags", "gate", "load_acf",
           "tune"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from compileiq import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
