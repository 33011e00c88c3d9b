"""nvcc options a compile command may hold that compileiq does not pass on: those that leave the
device code as it is (parallelism, reports, kept files, warning policy, host debug information),
set aside as fixed and not applied with why, and those whose build has nothing to tune (`-G`,
`-dlto`, an arch flag naming lto_XY), refused with why (`compile_db`)."""

from __future__ import annotations

import re

# nvcc options (nvcc 13.0 --help) that leave the device code as it is: set aside like host options,
# recorded as fixed and not applied, with why. Each -> (why, the values it takes; None: it takes none).
_PARALLEL = "compile-time parallelism of nvcc: device code is unchanged"
_REPORT = "nvcc report or listing only: device code is unchanged"
_KEEP = "keeps nvcc's intermediate files: device code is unchanged"
_WARNINGS = "warning policy: device code is unchanged"
_MACHINE = "64-bit host code, the only machine nvcc 13 has: device code is unchanged"
_HOST_DEBUG = "host debug information (nvcc -g; device debug is -G): device code is unchanged"
_COUNT = re.compile(r"\d{1,4}")
_WERROR_KINDS = re.compile(r"(all-warnings|cross-execution-space-call|default-stream-launch|deprecated-declarations"
                           r"|ext-lambda-captures-this|missing-launch-bounds|reorder)"
                           r"(,(all-warnings|cross-execution-space-call|default-stream-launch|deprecated-declarations"
                           r"|ext-lambda-captures-this|missing-launch-bounds|reorder))*")
_NUMBERS = re.compile(r"\d+(,\d+)*")
_ANY = re.compile(r".+")
_NO_DEVICE_EFFECT: dict[str, tuple[str, re.Pattern[str] | None]] = {
    "--threads": (_PARALLEL, _COUNT), "-t": (_PARALLEL, _COUNT),
    "--jobserver": (_PARALLEL, None), "-jobserver": (_PARALLEL, None),
    "--resource-usage": (_REPORT, None), "-res-usage": (_REPORT, None),
    "--verbose": (_REPORT, None), "-v": (_REPORT, None),
    "--keep": (_KEEP, None), "-keep": (_KEEP, None), "--save-temps": (_KEEP, None), "-save-temps": (_KEEP, None),
    "--keep-dir": (_KEEP, _ANY), "-keep-dir": (_KEEP, _ANY),
    "--Werror": (_WARNINGS, _WERROR_KINDS), "-Werror": (_WARNINGS, _WERROR_KINDS),
    "--Wreorder": (_WARNINGS, None), "-Wreorder": (_WARNINGS, None),
    "--Wdefault-stream-launch": (_WARNINGS, None), "-Wdefault-stream-launch": (_WARNINGS, None),
    "--Wmissing-launch-bounds": (_WARNINGS, None), "-Wmissing-launch-bounds": (_WARNINGS, None),
    "--Wext-lambda-captures-this": (_WARNINGS, None), "-Wext-lambda-captures-this": (_WARNINGS, None),
    "--display-error-number": (_WARNINGS, None), "-err-no": (_WARNINGS, None),
    "--no-display-error-number": (_WARNINGS, None), "-no-err-no": (_WARNINGS, None),
    "--diag-error": (_WARNINGS, _NUMBERS), "-diag-error": (_WARNINGS, _NUMBERS),
    "--diag-warn": (_WARNINGS, _NUMBERS), "-diag-warn": (_WARNINGS, _NUMBERS),
    "-m64": (_MACHINE, None), "--m64": (_MACHINE, None),
    "--machine": (_MACHINE, re.compile("64")), "-m": (_MACHINE, re.compile("64")),
    "-g": (_HOST_DEBUG, None), "--debug": (_HOST_DEBUG, None),
}  # fmt: skip

# nvcc options whose build has nothing to tune: refused with why, not with the base-flag allow-list.
_DEVICE_DEBUG = ("builds device debug code, every device optimisation off: nothing to tune; tune the release "
                 "build's command (without -G; -lineinfo keeps line numbers)")
_DOPT = ("sets device optimisation for a -G debug build: nothing to tune; tune the release build's command "
         "(without -G and --dopt)")
_LTO = ("makes link-time-optimisation IR: the device code is made at link time, where this command's settings "
        "do not reach it; tune a command without -dlto")
NOTHING_TO_TUNE = {"-G": _DEVICE_DEBUG, "--device-debug": _DEVICE_DEBUG, "--dopt": _DOPT, "-dopt": _DOPT,
                   "-dlto": _LTO, "--dlink-time-opt": _LTO, "-gen-opt-lto": _LTO, "--gen-opt-lto": _LTO}

# an arch flag naming lto_XY (`-code=lto_90`, `-arch=lto_90`, `-gencode arch=compute_90,code=lto_90`)
# embeds link-time-optimisation IR as -dlto does (nvcc 13.0 --dryrun: fatbinary kind=nvvm)
_LTO_CODE = re.compile(r"(?<![A-Za-z0-9_])lto_[0-9]")
_ARCH_OPTIONS = ("-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code")
_LTO_ARCH = ("names lto_XY, which makes link-time-optimisation IR as -dlto does: the device code is made at link "
             "time, where this command's settings do not reach it; tune a command that builds sm_XY code")


def lto_arch(flag: str, value: str) -> str | None:
    """Why an arch flag that names lto_XY has nothing to tune, or None (another flag or value)."""
    return _LTO_ARCH if flag in _ARCH_OPTIONS and _LTO_CODE.search(value) else None


def no_device_effect(flag: str, value: str) -> str | None:
    """Why the option leaves the device code as it is, or None (not such an option, or a value
    nvcc would not take: left to the base-flag allow-list to refuse)."""
    found = _NO_DEVICE_EFFECT.get(flag)
    if found is None:
        return None
    why, values = found
    takes_value = values is not None
    if takes_value != bool(value) or (values is not None and not values.fullmatch(value)):
        return None
    return why
