"""Building variants: the two-stage compile (PTX once per front-end configuration, ptxas per
variant), reading cubins, and the workers that run compiles (Ray tasks or local threads).

May import: core, source. The only importer of ray (workers).
"""
