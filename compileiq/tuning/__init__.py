"""The tuning run: the loop (ask -> claim -> compile -> evaluate -> record -> tell, then simplify),
the runner that evaluates claimed trials, what ends a run, its first minute, streaming refills,
taking over abandoned claims, and hints when the defaults fail to build.

May import: core, source, build, search, evaluate, store, results.
"""
