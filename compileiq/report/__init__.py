"""`compileiq report`: a study explained as one HTML page (or markdown + SVG), and two studies
compared; it renders the decision `results` makes, never its own.

May import: core, search, store, results.
"""
