"""The vocabulary every stage shares: errors, the records the store hands out, search spaces and
configurations, safe output files, metric ranges, child processes under limits, and the CUDA
toolchain found on this machine.

May import: nothing else in compileiq (the standard library and tomllib/tomli_w only).
"""
