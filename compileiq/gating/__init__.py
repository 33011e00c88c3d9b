"""The CI gate: rebuild each kernel with its ACF, check the result against the ACF's evidence with
named rules, and write the gate's reports (markdown, JUnit, JSON).

May import: core, source, build, evaluate, results.
"""
