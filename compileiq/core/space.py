"""Search spaces: parameters, configs, restrictions and rendering to argv (the declarative TOML
files per compiler version are read by `space_files`)."""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from math import prod
from typing import Any, Literal, Protocol, TypeVar

from compileiq.core import macro_space
from compileiq.core.defines import MACRO_NAME, macro_problem
from compileiq.core.errors import UsageError
from compileiq.core.macro_combinations import AllowedMacros, allowed_combinations

Value = bool | int | str
Stage = Literal["frontend", "ptxas"]
Kind = Literal["flag", "choice", "int"]
Risk = Literal["safe", "numerics", "semantics"]

_XPTXAS = ("-Xptxas", "--ptxas-options")


class SpaceError(UsageError):
    """A search space or a config that does not fit it."""


def _plain(value: object) -> Value:
    if type(value) in _PLAIN:
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        return str(value)
    if not isinstance(value, bool | int):
        item = getattr(value, "item", None)
        value = item() if callable(item) else value
    if isinstance(value, bool | int):
        return bool(value) if isinstance(value, bool) else int(value)
    raise SpaceError(f"config value {value!r} is not a bool, int or str")


_PLAIN = frozenset((bool, int, str))


def same(a: Value, b: Value) -> bool:
    return type(a) is type(b) and a == b


def _text(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Config:
    """One point of a search space: (name, value) pairs sorted by name, plain Python values."""

    items: tuple[tuple[str, Value], ...]

    @classmethod
    def of(cls, mapping: Mapping[str, Any]) -> Config:
        """Build a config from a mapping; numpy scalars become Python values."""
        return cls(tuple(sorted((str(k), _plain(v)) for k, v in mapping.items())))

    def as_dict(self) -> dict[str, Value]:
        """The config as a new dict."""
        return dict(self.items)

    @cached_property
    def key(self) -> str:
        """Canonical JSON text: the identity of this config in a study."""
        return canonical_key(self.as_dict())

    def __getitem__(self, name: str) -> Value:
        return self._values[name]

    @cached_property
    def _values(self) -> dict[str, Value]:
        return dict(self.items)

    def with_values(self, mapping: Mapping[str, Value]) -> Config:
        """A copy with the given names set (added or replaced); names contain dots, so no kwargs."""
        return Config.of({**self.as_dict(), **mapping})


@dataclass(frozen=True)
class Parameter:
    """One compiler option. It renders nothing at its default (unless `render_default`)."""

    name: str
    stage: Stage
    kind: Kind
    values: tuple[Value, ...]
    default: Value
    render: str
    risk: Risk
    help: str
    ptxas_render: str = ""  # what nvcc forwards to ptxas for a front-end value
    render_default: bool = False  # True for -D macros (their default is not the compiler's), `implied.spelled_out`

    def argv(self, value: Value) -> tuple[str, ...]:
        """Arguments for this value: () for a False flag, "default", or the default value."""
        return self._fill(self.render, value)

    def forwarded(self, value: Value) -> tuple[str, ...]:
        """The ptxas arguments nvcc itself derives from this front-end value (usually ())."""
        return self._fill(self.ptxas_render, value)

    def allows(self, value: Value) -> bool:
        """Whether value is one of this parameter's values (type-strict: True is not 1)."""
        try:
            return (type(value), value) in self._allowed
        except TypeError:  # unhashable: not a value of any parameter
            return False

    @cached_property
    def _allowed(self) -> frozenset[tuple[type, Value]]:
        return frozenset((type(v), v) for v in self.values)

    def _fill(self, template: str, value: Value) -> tuple[str, ...]:
        if not self.allows(value):
            raise SpaceError(f"{self.name}: value {value!r} not in {list(self.values)}")
        if not template or value is False and self.kind == "flag" and not self.render_default or same(value, "default"):
            return ()
        if same(value, self.default) and not self.render_default:
            return ()
        if value is False and self.kind == "flag":  # spelled out (`implied`): --ftz=true's off spelling
            return (template.removesuffix("=true") + "=false",) if template.endswith("=true") else ()
        return (template.replace("{value}", _text(value)),)

    def canonical(self) -> dict[str, Any]:
        """Everything that affects rendering (not `help`), for the space hash."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "help"}
        return {**data, "values": list(self.values)}




class Restriction(Protocol):
    """Which configurations may be built at all (a kernel's tune.toml restrictions, e.g.
    ``BX*BY <= 1024``): the searchers propose only allowed ones, nothing builds another."""

    @property
    def names(self) -> frozenset[str]:
        """The parameters it reads (``define.NAME``); one absent from a space reads its default."""
        ...

    @property
    def texts(self) -> tuple[str, ...]:
        """The restrictions as written, for the ACF and the study identity."""
        ...

    def allows(self, values: Mapping[str, Value]) -> bool: ...

    def may_allow(self, ranges: Mapping[str, tuple[int, int]]) -> bool:
        """False only when no configuration whose macros lie within ``ranges`` (``define.NAME``:
        lowest and highest value) is allowed: lets `macro_combinations` skip what cannot hold."""
        ...


@dataclass(frozen=True)
class SearchSpace:
    """The parameters of nvcc and ptxas for one compiler version; its hash names its content
    (the kernel's restrictions are the kernel's: part of the study identity, not of this hash)."""

    id: str
    compiler_version: str
    parameters: tuple[Parameter, ...]
    restriction: Restriction | None = field(default=None, compare=False)
    sha256: str = field(init=False)
    _tokens: dict[tuple[Stage, str], tuple[str, Value]] = field(
        init=False, repr=False, compare=False
    )
    # Per config key: known valid, rendered arguments (a driver renders each trial's twice).
    _valid: dict[str, bool] = field(init=False, repr=False, compare=False)
    _rendered: dict[tuple[str, str], tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _allowed: dict[str, AllowedMacros | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        no_duplicates(self.parameters, f"search space {self.id}")
        text = json.dumps([p.canonical() for p in self.parameters], sort_keys=True)
        object.__setattr__(self, "sha256", hashlib.sha256(text.encode()).hexdigest())
        object.__setattr__(self, "_tokens", _token_map(self.parameters))
        object.__setattr__(self, "_valid", {})
        object.__setattr__(self, "_rendered", {})
        object.__setattr__(self, "_allowed", {})

    def parameter(self, name: str) -> Parameter:
        """The parameter called name; SpaceError if there is none."""
        for p in self.parameters:
            if p.name == name:
                return p
        raise SpaceError(f"unknown parameter {name!r} in search space {self.id}{self._suggestion(name)}")

    def _suggestion(self, name: str) -> str:
        names = [p.name for p in self.parameters]
        same_tail = [n for n in names if n.split(".", 1)[-1] == name.split(".", 1)[-1]]
        close = same_tail or difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        if close:
            return f"; did you mean {' or '.join(close)}?"
        return "; `compileiq space` lists the parameters"

    def select(
        self,
        *,
        allow_numerics: bool = False,
        allow_semantics: bool = False,
        only: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
    ) -> SearchSpace:
        """A sub-space: numerics/semantics-risk parameters only when allowed; only/exclude by name."""
        for name in [*(only or ()), *exclude]:
            self.parameter(name)
        risks = ["safe"] + ["numerics"] * allow_numerics + ["semantics"] * allow_semantics
        kept = tuple(
            p
            for p in self.parameters
            if p.risk in risks and (only is None or p.name in only) and p.name not in exclude
        )
        return replace(self, parameters=kept)

    def with_defines(self, defines: Mapping[str, Sequence[Value]]) -> SearchSpace:
        """Add a front-end choice "define.NAME" per macro, rendering -DNAME=value; default first."""
        added = tuple(_define(name, values) for name, values in defines.items())
        return replace(self, parameters=self.parameters + added)

    def allowed_macro_values(self, most: int = 100_000) -> tuple[set[tuple[str, Value]], bool]:
        """(define.NAME, value) for each value of a searched macro that some allowed combination
        holds, and whether that is known (`macro_space.allowed_values`)."""
        return macro_space.allowed_values(self, most)

    def allowed_macros(self) -> AllowedMacros | None:
        """The combinations of the restricted macros the restriction allows, enumerated once
        (`macro_combinations.allowed_combinations`); None without a restriction or where
        enumerating would take too long."""
        if self.restriction is None:
            return None
        if "found" not in self._allowed:
            self._allowed["found"] = allowed_combinations(self.parameters, self.restriction)
        return self._allowed["found"]

    def restricted(self, restriction: Restriction | None) -> SearchSpace:
        """This space with only the configurations ``restriction`` allows (None: all of them)."""
        return replace(self, restriction=restriction)

    def allows(self, config: Config | Mapping[str, Value]) -> bool:
        """Whether the restriction (if any) allows config: one it does not is never built."""
        if self.restriction is None:
            return True
        return self.restriction.allows(config.as_dict() if isinstance(config, Config) else config)

    def macro_combinations(self) -> tuple[int | None, int]:
        """(allowed, all) combinations of the tuned macros (`macro_space.combination_count`)."""
        return macro_space.combination_count(self)

    def default_config(self) -> Config:
        """Every parameter at its default: the compiler's own baseline."""
        return Config.of({p.name: p.default for p in self.parameters})

    def size(self) -> int:
        """Number of configs: the plain product of the parameters' value counts, a restriction not
        applied (`implied.distinct_size` divides it by the twins' combinations and relies on that)."""
        return prod(len(p.values) for p in self.parameters)

    def validate(self, config: Config) -> None:
        """SpaceError unless config sets every parameter, and only those, to an allowed value,
        and the restriction (if any) allows it."""
        if self.knows_valid(config.key):
            return
        given = config.as_dict()
        for name in given:
            self.parameter(name)
        for p in self.parameters:
            if p.name not in given:
                raise SpaceError(f"config lacks parameter {p.name!r}")
            if not p.allows(given[p.name]):
                raise SpaceError(f"{p.name}: value {given[p.name]!r} not in {list(p.values)}")
        if not self.allows(given):
            raise SpaceError("its macros break the kernel's tune.toml restrictions")
        remember(self._valid, config.key, True)

    def knows_valid(self, key: str) -> bool:
        """True if the config whose canonical key is ``key`` was validated already (its JSON text
        is its whole content: the same text is the same config, type for type)."""
        return key in self._valid

    def frontend_args(self, config: Config) -> tuple[str, ...]:
        """nvcc arguments of the front-end parameters (for `nvcc -ptx`)."""
        return self._render("frontend", config)

    def ptxas_args(self, config: Config) -> tuple[str, ...]:
        """Arguments for a direct `ptxas` call, incl. what nvcc forwards from front-end values."""
        return self._render("ptxas", config)

    def _render(self, what: str, config: Config) -> tuple[str, ...]:
        found = self._rendered.get((what, config.key))
        if found is not None:
            return found
        if what == "frontend":
            found = tuple(a for p, v in self._pairs(config, "frontend") for a in p.argv(v))
        else:
            fwd = tuple(a for p, v in self._pairs(config, "frontend") for a in p.forwarded(v))
            found = fwd + self._own_ptxas_args(config)
        return remember(self._rendered, (what, config.key), found)

    def nvcc_args(self, config: Config) -> tuple[str, ...]:
        """Arguments for a one-step nvcc build: front-end args, then -Xptxas=ARG per ptxas arg."""
        own = self._own_ptxas_args(config)
        return self.frontend_args(config) + tuple(f"-Xptxas={a}" for a in own)

    def config_from_nvcc_args(self, args: Sequence[str]) -> Config:
        """Inverse of nvcc_args (also reads `-Xptxas A,B` and --ptxas-options=A); the allow-list:
        SpaceError naming any token this space cannot produce, or a parameter given twice."""
        values: dict[str, Value] = {}
        for stage, token in _tokens_of(args):
            shown = token if stage == "frontend" else f"-Xptxas={token}"
            if (stage, token) not in self._tokens:
                raise SpaceError(f"nvcc argument {shown!r} is not in search space {self.id}")
            name, value = self._tokens[(stage, token)]
            if name in values:
                raise SpaceError(f"nvcc argument {shown!r}: {name} is given twice")
            values[name] = value
        return self.default_config().with_values(values)

    def setting_of(self, stage: Stage, token: str) -> tuple[str, Value] | None:
        """The (parameter, value) that one argument token of a stage stands for (a value at the
        compiler's default spelled out, "-O3", included); None when the space has no such token."""
        return self._tokens.get((stage, token))

    def _pairs(self, config: Config, stage: Stage) -> Iterator[tuple[Parameter, Value]]:
        self.validate(config)
        return ((p, config[p.name]) for p in self.parameters if p.stage == stage)

    def _own_ptxas_args(self, config: Config) -> tuple[str, ...]:
        return tuple(a for p, v in self._pairs(config, "ptxas") for a in p.argv(v))


K = TypeVar("K")
V = TypeVar("V")
REMEMBERED = 1 << 16  # entries a per-config memo holds before it starts again empty


def remember(memo: dict[K, V], key: K, value: V) -> V:
    """Put ``value`` in a per-config memo (valid keys, rendered arguments, `Config`s by key),
    which forgets everything once full: bounded memory, no bookkeeping per entry."""
    if len(memo) >= REMEMBERED:
        memo.clear()
    memo[key] = value
    return value


def canonical_key(values: Mapping[str, Any]) -> str:
    """A config's identity in a study: its values as canonical JSON text (`Config.key`)."""
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def no_duplicates(params: Sequence[Parameter], where: str) -> None:
    names = [p.name for p in params]
    for name in names:
        if names.count(name) > 1:
            raise SpaceError(f"{where}: duplicate parameter {name!r}")


def _token_map(params: Sequence[Parameter]) -> dict[tuple[Stage, str], tuple[str, Value]]:
    tokens: dict[tuple[Stage, str], tuple[str, Value]] = {}
    for p in params:
        spelled = replace(p, render_default=True)  # a value at the default spelled out: "-O3", "--ftz=false"
        for v in p.values:
            for token in {*p.argv(v), *spelled.argv(v)}:
                if (p.stage, token) in tokens and tokens[(p.stage, token)][0] != p.name:
                    raise SpaceError(f"{p.name}: renders {token!r}, as another parameter does")
                tokens[(p.stage, token)] = (p.name, v)
    return tokens


def _tokens_of(args: Sequence[str]) -> Iterator[tuple[Stage, str]]:
    it = iter(args)
    for arg in it:
        flag, eq, rest = arg.partition("=")
        if flag in _XPTXAS:
            rest = rest if eq else next(it, "")
            yield from (("ptxas", t) for t in rest.split(","))
        else:
            yield "frontend", arg


def _define(name: str, values: Sequence[Value]) -> Parameter:
    vals = tuple(_plain(v) for v in values)
    bad = [v for v in vals if macro_problem(name, _text(v))]
    if not MACRO_NAME.fullmatch(name) or not vals or bad:
        raise SpaceError(f"bad define {name!r} with values {list(values)!r}")
    return Parameter(
        f"define.{name}", "frontend", "choice", vals, vals[0], f"-D{name}={{value}}",
        "safe", f"macro {name}", render_default=True,
    )  # fmt: skip
