"""Scoring builds: static metrics from the compiler's output, what a GPU-free objective may
recommend (eligibility), GPU timing through measurers (local, Ray actors, pools), screening,
confirmation and the A/B statistics.

May import: core, source, build.
"""
