"""Which configurations to try next: the searchers (Bayesian, random, exhaustive, local and
front search), their encodings and refit cadence, the searcher in its own process, and what a
finished search shows (convergence, setting importance).

May import: core. The only importer of skopt (surrogate: the Bayesian search's model).
"""
