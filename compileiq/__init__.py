"""compileiq: an open autotuner for nvcc/ptxas compiler settings of CUDA kernels."""

import importlib
import os
import sys
import types
from typing import Any

# The surrogate fits are small; a BLAS thread pool only competes with the parallel compilers
# (measured: a parallel nvcc doubled GP's fit time). Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"

# The Python API (compileiq.api), imported on first use so that `import compileiq` (and so every
# command, `compileiq flags` included) stays cheap.
_API = ("tune", "gate", "load_acf", "flags", "TuneResult", "TrialRow")
__all__ = ["TrialRow", "TuneResult", "__version__", "flags", "gate", "load_acf", "tune"]


def __getattr__(name: str) -> Any:
    if name in _CALLABLE_MODULES:  # the submodule, made callable by _Package.__setattr__
        return importlib.import_module(f"{__name__}.{name}")
    if name in _API:
        from compileiq import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})


# `compileiq.tune` and `compileiq.gate` name both a submodule (the tuner, the CI gate) and an API
# function. Importing a submodule sets it as an attribute of this package, so the attribute is
# the module whatever we define here; the module is made callable instead: calling it calls the
# API function (compileiq.api.tune / .gate), and `from compileiq import gate` still gives the
# module with everything in it.
_CALLABLE_MODULES = ("tune", "gate")


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from compileiq import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CALLABLE_MODULES and type(value) is types.ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
