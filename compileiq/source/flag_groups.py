"""Which base flags' relative order can change what nvcc builds.

nvcc reads two flags of one option where it takes the last (`-std`, `-rdc`, `-O`, `-maxrregcount`,
`--default-stream`) as the last one, and a `-D`/`-U` of one macro as the last one too; switches
(`-lineinfo`, `-w`, a warning number) are order-free. A flag of one group is ordered only against
the others of its group (`order_group`): what the gate's order check (`gating.flag_order`) and the
parsing of repeated base flags (`base_flags.parse_base_flags`) both read.
"""

from __future__ import annotations

# Options whose flags, where a command gives two, nvcc reads as the last one.
_LAST_WINS = ("-std=", "-rdc=", "-maxrregcount=", "--default-stream=")
_HOST_LEVELS = ("-O1", "-O2", "-O3")  # nvcc's host -O: the last one given
# Flags that only switch something on (or add a warning number): order-free among all others.
_SWITCHES = ("--extended-lambda", "--expt-relaxed-constexpr", "-lineinfo", "-w", "-Wno-deprecated-gpu-targets",
             "-Wno-deprecated-declarations")
UNKNOWN = "?"  # the group of flags not known to be order-free: their order among themselves is kept


def order_group(flag: str) -> str:
    """The flags whose relative order is kept: those of one group (a switch is its own group)."""
    if flag.startswith(("-D", "-U")):
        return "macro " + flag[2:].partition("=")[0]
    if flag in _HOST_LEVELS:
        return "-O"
    if prefix := next((p for p in _LAST_WINS if flag.startswith(p)), None):
        return prefix
    if flag in _SWITCHES or flag.startswith("--diag-suppress="):
        return flag
    return UNKNOWN
