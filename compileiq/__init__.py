"""compileiq: an open autotuner for nvcc/ptxas compiler settings of CUDA kernels."""

__version__ = "0.1.0"
