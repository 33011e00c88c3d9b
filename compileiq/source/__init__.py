"""Understanding a kernel before anything is built: the .cu file and its tune.toml, launch facts,
macros, base flags, a compilation database's real command, and the headers it reads (asked of
the preprocessor, `nvcc -M`), bundled as bytes for workers that share no disk.

May import: core.
"""
