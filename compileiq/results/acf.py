"""The advanced-control file (ACF): the chosen settings, their evidence and provenance, as TOML.

The ACF's one name for the rest of the code: reading and validating one (`acf_read`: `read`,
`parse`, the `Acf` record and the flags a build takes from it) and writing one (`acf_write`:
`AcfContent`, `render`, `write`, `write_or_keep`, `check_writable`) live in modules of their own,
each with one job, and are imported from here.

Reading one never trusts its argument text: every control is checked against the search space
and the arguments are re-rendered from the controls, so an ACF cannot inject anything the space
does not offer (-Xcompiler, --compiler-bindir, -o, --run ...); the evidence, a front, the
candidates to time and the shipped baseline are checked the same way (`acf_checks`).
"""

from __future__ import annotations

from compileiq.results.acf_checks import AcfError
from compileiq.results.acf_read import FORMAT_VERSION, MAX_BYTES, Acf, argv_of, parse, read, settled
from compileiq.results.acf_write import AcfContent, check_writable, render, write, write_or_keep

__all__ = ["FORMAT_VERSION", "MAX_BYTES", "Acf", "AcfContent", "AcfError", "argv_of", "check_writable", "parse",
           "read", "render", "settled", "write", "write_or_keep"]
