"""Names of internal linkage that are the same on every build.

nvcc names what has internal linkage after a hash of the source file's absolute path: a kernel in
an anonymous namespace ``_ZN36_GLOBAL__N__<8 hex>_4_k_cu_..4twiceEPfi`` (with -rdc or without),
and under -rdc=true every ``static`` function or variable ``__nv_static_25__<8 hex>_4_k_cu_...``.
compileiq compiles each front end in a fresh scratch folder (another on every build, worker and
host), so those names, the code hash over them and every recorded entry name would differ on each
build of the same source and flags: a rerun would quarantine its own rows, and the gate would see
changed code in an untouched ACF. The path's 8 hex digits are written as `PATH_HASH` in the PTX
before ptxas reads it: a consistent rename within the translation unit (all its names carry the
same path hash), so the machine code, the names ptxas reports and the PTX's shared-build key are
the same everywhere. (The measuring executable, a full nvcc build, keeps nvcc's names: it launches
its kernels through their host stubs, never by name.)"""

from __future__ import annotations

import re

PATH_HASH = "00000000"  # the 8 hex digits every build writes for the source path's hash
# Where nvcc puts them: `__nv_static_` opens a name (no identifier character before it); the anonymous
# namespace is a mangled name's length-prefixed component (`..._ZN36_GLOBAL__N__`, a digit before
# it). A user's own identifier holding either text mid-name (`k__nv_static_1__deadbeef_a`) is left
# as it is: rewriting it renamed two kernels into one (a red team's).
_PATH_HASH_AT = r"((?<=\d)_GLOBAL__N__|(?<![\w$])__nv_static_\d{1,6}__)[0-9a-f]{8}_"
_PTX_PATH_HASH = re.compile(_PATH_HASH_AT.encode())  # PTX bytes (\w: ASCII, as PTX names are)
_NAME_PATH_HASH = re.compile(_PATH_HASH_AT)


def stable_ptx(ptx: bytes) -> bytes:
    """``ptx`` with the source path's hash in its names of internal linkage written as PATH_HASH."""
    return _PTX_PATH_HASH.sub(rb"\g<1>" + PATH_HASH.encode() + b"_", ptx)


def stable_name(name: str) -> str:
    """A compiled name as `stable_ptx` makes it (a row recorded before it had nvcc's)."""
    return _NAME_PATH_HASH.sub(rf"\g<1>{PATH_HASH}_", name)
