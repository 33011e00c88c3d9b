"""Reading and validating a kernel's tune.toml: every error names the file and the key."""

from __future__ import annotations

import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from compileiq.core.bounded_read import is_dir
from compileiq.core.defines import macro_problem, number_problem
from compileiq.core.output_file import not_regular
from compileiq.core.text import printable
from compileiq.source import arch as gpu_arch
from compileiq.source import restrictions
from compileiq.source.arch import ARCH, DEFAULT_ARCH
from compileiq.source.base_flags import BaseFlagError, BaseFlags, parse_base_flags, path_problem
from compileiq.source.entry_names import KERNEL_NAME
from compileiq.source.launch import RANGES, ExpressionError, check
from compileiq.source.spec import (
    DEFAULT_BLOCK_SIZE,
    MAX_TIMEOUT_S,
    MODES,
    TUNE_FILE,
    KernelError,
    KernelSpec,
    LaunchFacts,
    Values,
    metric_regex_problem,
    resolved,
)

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LAUNCH_BOUNDS_RE = re.compile(r"__launch_bounds__\s*\(\s*(\d+|[A-Za-z_]\w*)\s*[,)]")
_LAUNCH_KEYS = {"block_size", "dynamic_smem"}
# tune.toml's top-level keys, as docs/file-formats.md lists them ([tune.defines] and restrictions
# under "tune"); a KernelSpec field the run sets itself (shipped, system_dirs, ...) is no key: unknown.
_TOP_KEYS = frozenset({"arch", "entries", "block_size", "dynamic_smem", "include_dirs", "nvcc_flags", "compile_timeout_s",
                       "allow_numerics", "allow_semantics", "rtol", "atol", "mode", "metric_regex", "run_args",
                       "defines", "launch", "tune"})
_TUNE_KEYS = {"defines", "restrictions"}


def parse_spec(source: Path, arch: str | None) -> KernelSpec:
    """The spec of ``source`` from the tune.toml beside it (defaults without one)."""
    toml_path = source.parent / TUNE_FILE
    if os.path.lexists(toml_path) and (kind := not_regular(toml_path) or (None if toml_path.exists() else
                                                                          "a symlink loop or a dangling link")):
        raise KernelError(f"{toml_path} is {kind}, not a regular file: a kernel's tune.toml is a file, or absent")
    raw = _read_toml(toml_path) if toml_path.is_file() else {}
    return _Parser(toml_path, raw, source, source.read_text(errors="replace")).spec(arch)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # UTF-8 whatever the locale; a BOM (Windows editors) skipped
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise KernelError(f"{path}: malformed TOML: {reason}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise KernelError(f"{path}: malformed TOML: nested too deeply") from None


class _Parser:
    """Validates one tune.toml; every error names the file and the key."""

    def __init__(self, path: Path, raw: dict[str, Any], source: Path, text: str) -> None:
        self.path, self.raw, self.source, self.text = path, raw, source, text

    def fail(self, key: str, problem: str) -> KernelError:
        """One line: a key from the file (a macro named "A\\nB") shown with its control characters escaped."""
        return KernelError(f"{self.path}: {printable(key)}: {problem}")

    def spec(self, arch: str | None) -> KernelSpec:
        if set(self.raw) - _TOP_KEYS:
            raise self.fail(min(set(self.raw) - _TOP_KEYS), "unknown key")
        defines, tuned = self.defines(), self.tuned_defines()
        if both := set(dict(defines)) & set(dict(tuned)):
            raise self.fail(f"tune.defines.{min(both)}", "also set in [defines]")
        flags = self.nvcc_flags()
        set_by_flags = {f[2:].partition("=")[0] for f in flags.flags if f.startswith(("-D", "-U"))}
        if both := set_by_flags & set(dict(tuned)):  # its -D would fight the tuned value's, one build in two
            raise self.fail(f"tune.defines.{min(both)}", "also set by nvcc_flags (-D or -U)")
        return KernelSpec(
            name=self.source.stem,
            source=self.source,
            arch=self.arch(arch),
            entries=tuple(self.str_list("entries") or ()),
            block_size=self.block_size(dict(defines), dict(tuned)),
            dynamic_smem=self.dynamic_smem(),
            defines=defines,
            tuned_defines=tuned,
            include_dirs=self.include_dirs(flags),
            system_dirs=tuple(resolved(self.source.parent / d, "include folder") for d in flags.system_dirs),
            compile_timeout_s=self.timeout(),
            allow_numerics=self.flag("allow_numerics"),
            allow_semantics=self.flag("allow_semantics"),
            rtol=self.tolerance("rtol", 1e-5),
            atol=self.tolerance("atol", 1e-6),
            mode=self.mode(),
            metric_regex=self.metric_regex(),
            run_args=tuple(self.str_list("run_args") or ()),
            nvcc_flags=flags,
            launch=self.launch(),
            block_size_given="block_size" in self.raw,
            restrictions=self.restriction_texts(dict(defines), dict(tuned)),
            arch_overridden=f"{given} that tune.toml gives" if arch and (given := self.raw.get("arch")) not in (None, arch)
            else None,
            toml_arch=str(self.raw["arch"]) if isinstance(self.raw.get("arch"), str) else None,
        )

    def tolerance(self, key: str, default: float) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            raise self.fail(key, "must be a finite number >= 0")
        return float(value)

    def mode(self) -> str:
        value = self.raw.get("mode", "harness")
        if value not in MODES:
            raise self.fail("mode", f"must be one of: {', '.join(MODES)}")
        return str(value)

    def metric_regex(self) -> str | None:
        value = self.raw.get("metric_regex")
        if value is None:
            return None
        if problem := metric_regex_problem(value):
            raise self.fail("metric_regex", problem)
        return str(value)

    def arch(self, override: str | None) -> str:
        value = self.raw.get("arch")
        if value is not None and (not isinstance(value, str) or not ARCH.fullmatch(value)):
            raise self.fail("arch", f"{value!r} is not an arch like 'sm_90'")
        if override is not None and not ARCH.fullmatch(override):
            raise KernelError(f"{override!r} is not an arch like 'sm_90'")
        return override or value or gpu_arch.detect_arch() or DEFAULT_ARCH

    def str_list(self, key: str) -> list[str] | None:
        value = self.raw.get(key)
        ok = isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)
        if value is not None and not ok:
            raise self.fail(key, "must be a non-empty list of non-empty strings")
        return value

    def dynamic_smem(self) -> int:
        if isinstance(value := self.raw.get("dynamic_smem"), str):
            raise self.fail("dynamic_smem", f"{value[:60]!r}: a number of bytes here; an expression over macros "
                                            "(\"2*BLOCK*sizeof(float)\") goes in a [launch.KERNEL] table")
        return self.integer("dynamic_smem", 0, *RANGES["dynamic_smem"])

    def integer(self, key: str, default: int, low: int, high: int = 2**31 - 1) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(key, f"must be an integer from {low} to {high}")
        return value

    def timeout(self) -> float:
        value = self.raw.get("compile_timeout_s", 60)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT_S:
            raise self.fail("compile_timeout_s", f"must be a positive number of seconds, at most {MAX_TIMEOUT_S}")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self.raw.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def include_dirs(self, flags: BaseFlags) -> tuple[Path, ...]:
        names = self.str_list("include_dirs") or []
        for name in names:
            if problem := path_problem(name):
                raise self.fail("include_dirs", problem)
        dirs = tuple(resolved(self.source.parent / d, "include folder")
                     for d in [*names, *flags.include_dirs, *flags.system_dirs])
        missing = [d for d in dirs if not is_dir(d)]
        if missing:
            raise self.fail("include_dirs", f"not a directory: {missing[0]}")
        return tuple(dict.fromkeys(dirs))

    def nvcc_flags(self) -> BaseFlags:
        value = self.raw.get("nvcc_flags")
        if value is None:
            return BaseFlags()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail("nvcc_flags", "must be a list of non-empty strings")
        try:
            return parse_base_flags(value, f"{self.path}: nvcc_flags")
        except BaseFlagError as error:
            raise KernelError(str(error)) from None

    def launch(self) -> tuple[LaunchFacts, ...]:
        table = self.raw.get("launch", {})
        if not isinstance(table, dict):
            raise self.fail("launch", "must be a table of [launch.KERNEL] tables")
        return tuple(self.launch_facts(name, facts) for name, facts in table.items())

    def launch_facts(self, name: str, facts: Any) -> LaunchFacts:
        key = f"launch.{name}"
        if not KERNEL_NAME.fullmatch(name):
            raise self.fail(key, "not a kernel name")
        if not isinstance(facts, dict) or not facts or set(facts) - _LAUNCH_KEYS:
            raise self.fail(key, "must be a table with block_size and/or dynamic_smem")
        values: dict[str, str] = {}
        for fact, value in facts.items():
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise self.fail(f"{key}.{fact}", "must be an integer or an arithmetic expression")
            try:
                check(str(value))
            except ExpressionError as error:
                raise self.fail(f"{key}.{fact}", str(error)) from None
            values[fact] = str(value)
        return LaunchFacts(name, values.get("block_size"), values.get("dynamic_smem"))

    def table(self, key: str, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.fail(key, "must be a table")
        bad = [name for name in raw if macro_problem(name)]
        if bad:
            raise self.fail(f"{key}.{bad[0]}", "not a valid macro name")
        return raw

    def defines(self) -> tuple[tuple[str, str], ...]:
        table = self.table("defines", self.raw.get("defines", {}))
        for name, value in table.items():
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise self.fail(f"defines.{name}", "must be an integer, float or string")
            if problem := number_problem(value) or macro_problem(name, str(value)):
                raise self.fail(f"defines.{name}", problem)
        return tuple(sorted((name, str(value)) for name, value in table.items()))

    def tuned_defines(self) -> tuple[tuple[str, Values], ...]:
        tune = self.raw.get("tune", {})
        if not isinstance(tune, dict):
            raise self.fail("tune", "must be a table")
        if set(tune) - _TUNE_KEYS:
            raise self.fail(f"tune.{min(set(tune) - _TUNE_KEYS)}", "unknown key")
        table = self.table("tune.defines", tune.get("defines", {}))
        return tuple((name, self.values(name, vals)) for name, vals in table.items())

    def restriction_texts(self, defines: dict[str, str], tuned: dict[str, Values]) -> tuple[str, ...]:
        tune = self.raw.get("tune", {})
        if "restrictions" not in tune:
            return ()
        try:
            texts = restrictions.parse(tune["restrictions"], defines, tuned)
        except ValueError as error:
            raise self.fail("tune.restrictions", str(error)) from None
        found = restrictions.restrictions_of(texts, defines, tuned)
        broken = found.first_broken({}) if found else None
        if broken is not None:
            raise self.fail("tune.restrictions", f"the defaults (each tuned macro's first value) {broken}")
        return texts

    def values(self, name: str, values: Any) -> Values:
        key = f"tune.defines.{name}"
        if not isinstance(values, list) or not values:
            raise self.fail(key, "must be a non-empty list of values")
        if any(isinstance(v, bool) or not isinstance(v, int | str) for v in values):
            raise self.fail(key, "values must be integers or strings")
        if len(set(values)) != len(values):
            raise self.fail(key, "values must be distinct")
        for value in values:
            if problem := number_problem(value) or macro_problem(name, str(value)):
                raise self.fail(key, problem)
        return tuple(values)

    def block_size(self, defines: dict[str, str], tuned: dict[str, Values]) -> int | str:
        value = self.raw.get("block_size")
        if value is None:
            return self.launch_bounds(defines, tuned)
        if isinstance(value, str):
            values = tuned.get(value)
            if values is None:
                raise self.fail("block_size", f"{value!r} is not a tuned define (an expression such as "
                                              f"\"32*ROWS\" goes in a [launch.KERNEL] table)")
            low, high = RANGES["block_size"]
            if not all(isinstance(v, int) and low <= v <= high for v in values):
                raise self.fail("block_size", f"tuned define {value!r} has a non-block-size value")
            return value
        return self.integer("block_size", DEFAULT_BLOCK_SIZE, *RANGES["block_size"])

    def launch_bounds(self, defines: dict[str, str], tuned: dict[str, Values]) -> int | str:
        match = _LAUNCH_BOUNDS_RE.search(self.text)
        token = match.group(1) if match else ""
        if token in tuned and all(isinstance(v, int) for v in tuned[token]):
            return token
        token = defines.get(token) or self.source_define(token) or token
        # a bound above 1024 (nvcc only warns) bounds nothing a block can have: the default then
        return int(token) if token.isdigit() and 0 < int(token) <= RANGES["block_size"][1] else DEFAULT_BLOCK_SIZE

    def source_define(self, name: str) -> str | None:
        if not _NAME_RE.fullmatch(name):
            return None
        pattern = rf"^[ \t]*#[ \t]*define[ \t]+{name}[ \t]+(\d+)\b"
        match = re.search(pattern, self.text, re.MULTILINE)
        return match.group(1) if match else None
