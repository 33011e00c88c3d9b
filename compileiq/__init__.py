"""compileiq: an open autotuner for nvcc/ptxas compiler settings of CUDA kernels."""

import os

# The surrogate fits are small; a BLAS thread pool only competes with the parallel compilers
# (measured: a parallel nvcc doubled GP's fit time). Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
