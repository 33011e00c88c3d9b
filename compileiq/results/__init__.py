"""From recorded trials to a decision: the Pareto front and the one choice on it, simplification,
ablation, the explanation every view renders, the ACF with its evidence, and the ACF's flags in
each build system's shape.

May import: core, source, evaluate.
"""
