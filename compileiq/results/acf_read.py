"""Reading an ACF: the validated record (`Acf`) and the flags a build takes from it, and the checks
an ACF's text passes before it is one.

Reading one never trusts its argument text: every control is checked against the search space
and the arguments are re-rendered from the controls (`settled`, `argv_of`: the writer, `acf_write`,
renders them the same way), so an ACF cannot inject anything the space does not offer
(-Xcompiler, --compiler-bindir, -o, --run ...); the evidence, a front, the candidates to time and
the shipped baseline are checked the same way (`acf_checks`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compileiq.core import bounded_read, implied
from compileiq.core.defines import define_arg_problem
from compileiq.core.space import Config, SearchSpace, SpaceError
from compileiq.core.space_files import load_space
from compileiq.core.text import printable
from compileiq.core.words import word_problem
from compileiq.results import acf_checks
from compileiq.results.acf_checks import AcfError, one_line
from compileiq.source import restrictions
from compileiq.source.arch import ARCH
from compileiq.source.arch_code import arch_args, ptx_arch
from compileiq.source.base_flags import (
    CAPPED,
    SYSTEM,
    BaseFlagError,
    BaseFlags,
    parse_base_flags,
    ptxas_cap_args,
    ptxas_forwarded_args,
)
from compileiq.source.launch import ExpressionError, evaluate
from compileiq.source.spec import ShippedBuild

FORMAT_VERSION = 1
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Acf:
    """A validated advanced-control file."""

    path: Path
    kernel: str
    source_path: str
    source_sha256: str
    arch: str
    nvcc_version: str
    toolchain_build: str
    controls: dict[str, Any]  # parameter name -> value, non-defaults and every define
    fixed_defines: tuple[str, ...]
    frontend_args: tuple[str, ...]
    ptxas_args: tuple[str, ...]
    argv: tuple[str, ...]  # for a one-step `nvcc` build, without -arch
    objective: dict[str, Any]
    evidence: dict[str, Any]
    provenance: dict[str, Any]
    data: dict[str, Any]
    base: BaseFlags = field(default_factory=BaseFlags)  # the flags the code needs to build at all (tune.toml nvcc_flags)
    restrictions: tuple[str, ...] = ()  # tune.toml's [tune] restrictions, which the controls satisfy
    shipped: ShippedBuild | None = None  # [baseline]: the shipped build the tuning started from
    remove: tuple[str, ...] = ()  # shipped flags the chosen settings turn off: remove them from the command
    mode: str | None = None  # how a timed run reported its time ("harness", "program"); None: not recorded
    metric_regex: str | None = None  # program mode: the pattern its time was read with (recorded, never used)
    entries: tuple[str, ...] | None = None  # tune.toml's entries it was scored by (() every kernel; None: not recorded)

    def flags(self, stage: str = "all", with_arch: bool = True, with_base: bool = False,
              absolute: bool = False) -> tuple[str, ...]:
        """The tuned settings for a build; ``with_base`` adds what a rebuild needs besides them,
        its include folders as paths from the current folder (``absolute``: from the root)."""
        arch = self.arch_args() if with_arch else ()
        base = self.base_args(absolute) if with_base else ()
        if stage == "ptxas":  # ptxas needs the arch too: its default is older than any PTX target here
            compile_only = ("--compile-only",) if with_base and self.base.relocatable else ()
            # with the base flags: what nvcc hands ptxas of them (-lineinfo: --generate-line-info), its cap last
            base = ptxas_forwarded_args(self.base.flags) + ptxas_cap_args(self.base.flags) if with_base else ()
            return compile_only + (f"-arch={self.arch}",) * with_arch + self.ptxas_args + base
        if stage == "frontend":  # the PTX's arch: compute_80 where the shipped build makes sm_86 code from it
            arch = (f"-arch={self.ptx_arch()}",) if with_arch and self.ptx_arch() != self.arch else arch
            return arch + base + self.frontend_args + self.fixed_defines
        return arch + base + self.argv

    def arch_args(self) -> tuple[str, ...]:
        """How a build targets the arch: as the shipped command's own flags for it build it (its
        `-gencode arch=compute_80,code=sm_80`, or `-arch=compute_80 -code=sm_80`, makes machine code
        alone: `-arch=compute_80 -code=sm_80`, never -arch=sm_80, which adds PTX; -arch=compute_80
        -code=sm_86 makes it from older PTX), else -arch=sm_XY. A PTX-only build (-arch=compute_80)
        stays so unless the choice holds ptxas settings, which need machine code to take effect:
        then -arch=compute_80 -code=sm_80 -code=compute_80 (`flag_formats.code_note` says so)."""
        applied = (f.flag for f in self.shipped.fixed if f.applied) if self.shipped is not None else ()
        if found := arch_args(applied, self.arch, machine_code=bool(self.ptxas_args)):
            return found
        # -arch=compute_80 -code=sm_80,sm_86 (sm_80 left out): sm_86 from compute_80 PTX, as the trials were
        older = self.ptx_arch()
        return (f"-arch={older}", f"-code={self.arch}") if older != self.arch else (f"-arch={self.arch}",)

    def ptx_arch(self) -> str:
        """The arch its PTX was compiled for, and a rebuild compiles it for (`arch_code.ptx_arch`):
        the shipped build's compute_80 where it makes sm_86 machine code from it (from flags that
        also build archs left out, `-code=sm_80,sm_86`, too), else the arch."""
        return ptx_arch((f.flag for f in self.shipped.fixed) if self.shipped is not None else (), self.arch)

    def source_candidates(self) -> tuple[Path, ...]:
        """Where the kernel may be (file-formats.md), first first: `[kernel] path` from the ACF's
        folder (of a symlinked ACF's target first), else the `source` name beside it. Never from the
        current folder: the ACF would be held to another file depending on where a command runs."""
        given = Path(self.source_path)
        named = Path(str(self.data.get("kernel", {}).get("source", given.name))).name
        linked = Path(os.path.realpath(self.path)).parent  # an ACF that is a symlink: its target's folder too
        folders = ((linked,) if linked != Path(os.path.realpath(self.path.parent)) else ()) + (self.path.parent,)
        tried = [given if given.is_absolute() else folder / given for folder in folders]
        return tuple(dict.fromkeys([*tried, *(folder / named for folder in folders if named)]))

    def named_for_kernel(self, candidate: Path) -> bool:
        """Whether a file's name is the kernel's (`transpose.cu` for kernel "transpose"), as the gate
        holds the file it found to: `[kernel] path` may climb out with `..` (store/ ACFs point at
        ../kernels/x/x.cu) or be absolute, but never lead to a file of another name (../victim/other.cu)."""
        return candidate.stem == self.kernel

    def source_file(self) -> Path | None:
        """The kernel source where `source_candidates` finds it, named for the kernel; None where it
        is not beside the ACF (a build folder holding the ACF alone)."""
        return next((c for c in self.source_candidates() if self.named_for_kernel(c) and bounded_read.is_file(c)), None)

    def source_from_here(self) -> str:
        """The kernel source as a path from the current folder: where it was found beside the ACF,
        else where the ACF says it is (relative to the ACF's folder), never a file there of another
        name (`[kernel] path` forged to ../victim/other.cu): AcfError where every place it names is one."""
        candidates = self.source_candidates()
        elsewhere = next((c for c in candidates if self.named_for_kernel(c) or not bounded_read.is_file(c)), None)
        found = self.source_file() or elsewhere  # its folder's symlinks followed: `link/..` is not where `link` is
        if found is None:
            raise AcfError(f"{self.path}: its kernel {printable(self.kernel)!r} is not at the files it names "
                           f"({', '.join(printable(str(c)) for c in candidates)}: each another file)")
        return os.path.relpath(Path(os.path.realpath(found.parent)) / found.name)

    def base_args(self, absolute: bool = False) -> tuple[str, ...]:
        """The base flags for a build run from the current folder: a relative include folder is
        recorded relative to the kernel's folder (as tune.toml gives it), which is seldom here."""
        folder = os.path.dirname(self.source_from_here())
        def path(d: str) -> str:
            found = os.path.normpath(os.path.join(folder, d))
            return os.path.abspath(found) if absolute else found

        return (self.base.flags + tuple(f"-I{path(d)}" for d in self.base.include_dirs)
                + tuple(f"{SYSTEM}{path(d)}" for d in self.base.system_dirs))


def read(path: Path, space: SearchSpace | None = None) -> Acf:
    """Parse and validate an ACF; AcfError with a one-line reason otherwise."""
    try:
        text = bounded_read.read_text(path, MAX_BYTES, encoding="utf-8-sig")  # a BOM (Windows editors) is skipped
    except bounded_read.FileReadError as error:
        if error.problem == "missing":
            raise AcfError(f"ACF not found: {path}") from None
        if error.problem == "not-regular":  # never opened: reading a named pipe blocks
            raise AcfError(f"{path} is not a readable ACF: it is {error.kind}, not a regular file") from None
        if error.problem == "too-large":
            raise AcfError(f"{path} is not an ACF: {error.size} bytes (an ACF is a few KiB)") from None
        raise AcfError(f"{path} is not a readable ACF: it {error.detail}") from None
    return parse(path, text, space)


def parse(path: Path, text: str, space: SearchSpace | None = None) -> Acf:
    """Validate an ACF's text (`path` names it in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise AcfError(f"{path} is not a readable ACF: {one_line(error)}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise AcfError(f"{path} is not a readable ACF: nested too deeply") from None
    try:
        return _validated(path, data, space)
    except (KeyError, TypeError, ValueError) as error:
        raise AcfError(f"{path} is not a valid ACF: missing or malformed {one_line(error)}") from None
    except SpaceError as error:
        raise AcfError(f"{path}: {error}") from None


def _validated(path: Path, data: dict[str, Any], space: SearchSpace | None) -> Acf:
    if "format" not in data:  # a tune.toml or another TOML file given by mistake
        raise AcfError(f"{path} is not an ACF (no format key): give the .acf.toml file that compileiq tune wrote")
    if type(form := data.get("format")) is not int:  # `format = true` or "1" is no 1
        kinds = {bool: "a boolean", str: "a string", float: "a float"}
        raise AcfError(f"{path}: unsupported ACF format {form!r}: format must be the integer {FORMAT_VERSION}, "
                       f"not {kinds.get(type(form), 'a ' + type(form).__name__)}")
    if form != FORMAT_VERSION:
        raise AcfError(f"{path}: unsupported ACF format {form!r} (this compileiq reads {FORMAT_VERSION})")
    kernel, tools, args = data["kernel"], data["toolchain"], data["args"]
    argv = tuple(_strings(args["argv"], "args.argv"))
    fixed = tuple(_strings(args["defines"], "args.defines"))
    _check_words(path, argv)
    base = space or load_space(str(tools["nvcc"]))
    _check_tokens(path, base, argv, fixed)
    controls = dict(data["controls"])
    config, full_space = settled(base, controls, [t[2:].partition("=")[0] for t in argv if t.startswith("-D")])
    acf_checks.check_args(path, args, argv_of(full_space, config, fixed), full_space, config)
    arch = kernel["arch"]
    if not isinstance(arch, str) or not ARCH.fullmatch(arch):
        raise AcfError(f"{path}: bad arch: kernel.arch = {str(arch)[:40]!r} is not an arch like 'sm_90'")
    acf_checks.check_numbers(path, dict(data.get("objective", {})), dict(data.get("evidence", {})))
    acf_checks.check_objective(path, dict(data.get("objective", {})), dict(data.get("evidence", {})))
    acf_checks.check_front(path, dict(data.get("objective", {})), dict(data.get("evidence", {})), full_space)
    restrictions = _restrictions(path, kernel.get("restrictions", []), config, fixed)
    try:
        base_flags = parse_base_flags(_strings(data.get("base", {}).get("nvcc_flags", []), "base.nvcc_flags"),
                                      f"{path}: base.nvcc_flags")
    except BaseFlagError as error:
        raise AcfError(str(error)) from None
    if (cap := base_flags.register_cap) is not None and controls.get(CAPPED, "default") != "default":
        raise AcfError(f"{path}: controls.{CAPPED} = {controls[CAPPED]!r} has no effect beside base.nvcc_flags' {cap}: "
                       "nvcc hands ptxas its own cap last (compileiq tune never writes both)")
    mode, metric_regex = acf_checks.measuring(path, kernel)
    shipped = acf_checks.shipped_baseline(path, data.get("baseline"), full_space)
    acf_checks.check_arch(path, arch, dict(data.get("evidence", {})), shipped)
    acf_checks.check_to_time(path, dict(data.get("evidence", {})), full_space, shipped,
                             str(kernel.get("path", kernel.get("source", ""))))
    remove = acf_checks.checked_remove(path, data["baseline"], shipped, config) if shipped is not None else ()
    return Acf(
        path=path, kernel=str(kernel["name"]), source_path=str(kernel.get("path", kernel.get("source", ""))),
        source_sha256=str(kernel["source_sha256"]), arch=arch,
        nvcc_version=str(tools["nvcc"]), toolchain_build=str(tools.get("build", "")), controls=controls,
        fixed_defines=fixed, frontend_args=full_space.frontend_args(config),
        ptxas_args=full_space.ptxas_args(config), argv=argv, objective=dict(data.get("objective", {})),
        evidence=dict(data.get("evidence", {})), provenance=dict(data.get("provenance", {})), data=data,
        base=base_flags, restrictions=restrictions, shipped=shipped, remove=remove, mode=mode,
        metric_regex=metric_regex, entries=_entries(kernel),
    )  # fmt: skip


def _entries(kernel: dict[str, Any]) -> tuple[str, ...] | None:
    """kernel.entries: the kernels its objective scored (tune.toml's entries; [] every kernel); None
    where it records none (an ACF written before they were recorded): nobody can tell."""
    return tuple(_strings(kernel["entries"], "kernel.entries")) if "entries" in kernel else None


def _restrictions(path: Path, texts: Any, config: Config, fixed: tuple[str, ...]) -> tuple[str, ...]:
    """kernel.restrictions: conditions the safe evaluator accepts, over the ACF's own macros, that
    its controls satisfy (an ACF whose settings break its kernel's restrictions was not tuned)."""
    if texts == []:
        return ()
    macros: dict[str, int | str] = dict(token[2:].partition("=")[::2] for token in fixed)
    macros.update({k.removeprefix("define."): v for k, v in config.items
                   if k.startswith("define.") and not isinstance(v, bool)})
    try:
        checked = restrictions.parse(texts, {}, {name: (0,) for name in macros})
        broken = [t for t in checked if not evaluate(t, macros, condition=True)]
    except (ValueError, ExpressionError) as error:
        raise AcfError(f"{path}: kernel.restrictions: {one_line(error)}") from None
    if broken:
        raise AcfError(f"{path}: kernel.restrictions: the controls break {broken[0]!r}")
    return checked


def _check_words(path: Path, argv: tuple[str, ...]) -> None:
    """Every argument but a -D (held to the macro allow-list) is one plain word, whatever search
    space this compileiq reads: nvcc hands -Xptxas values to /bin/sh as they are."""
    if bad := next(((t, p) for t in argv if not t.startswith("-D") and (p := word_problem(t))), None):
        raise AcfError(f"{path}: args.argv holds {printable(bad[0])[:80]!r}: {bad[1]} (nvcc hands it to /bin/sh)")


def _check_tokens(path: Path, space: SearchSpace, argv: tuple[str, ...], fixed: tuple[str, ...]) -> None:
    """Name the first argument the space cannot produce (the allow-list); `args.defines` holds
    -D defines only (anything else there would be echoed back as "expected")."""
    if stray := next((t for t in fixed if not t.startswith("-D")), None):
        raise AcfError(f"{path}: args.defines holds {printable(stray)[:80]!r}, which is not a -D define")
    defines = [t for t in (*fixed, *argv) if t.startswith("-D")]
    for token in defines:
        if problem := define_arg_problem(token):
            raise AcfError(f"{path}: {token!r} is not an allowed define (-DNAME or -DNAME=VALUE): {problem}")
    space.config_from_nvcc_args([t for t in argv if not t.startswith("-D")])


def settled(base: SearchSpace, controls: Mapping[str, Any], order: Sequence[str]) -> tuple[Config, SearchSpace]:
    """The config an ACF's controls stand for and the space it lives in: the compiler's space
    (`base`) with the tuned macros after it, in ``order`` (tune.toml's; TOML tables do not keep
    it, so a reader takes it from argv). The writer renders an ACF's arguments from this and the
    reader checks them against it: one order, whatever order a run searched its settings in
    (`--only define.X` put the macro before a shipped flag it held, and the ACF it wrote was refused)."""
    names = sorted((n.removeprefix("define.") for n in controls if n.startswith("define.")),
                   key=lambda n: order.index(n) if n in order else len(order))
    defines = {name: [controls[f"define.{name}"]] for name in names}
    space = implied.build_space(base, defines, controls)  # -ftz=false --use_fast_math: as `tune` and the gate
    config = space.default_config().with_values(controls)
    space.validate(config)
    return config, space


def argv_of(space: SearchSpace, config: Config, fixed: Sequence[str]) -> tuple[str, ...]:
    """An ACF's args.argv: the settings' nvcc arguments in ``space``'s order (`settled`), then the
    fixed defines."""
    return (*space.nvcc_args(config), *fixed)


def _strings(values: Any, where: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError(where)
    return values
