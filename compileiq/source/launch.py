"""Launch facts as small arithmetic over macros: ``2*BLOCK*sizeof(float)``, ``BX * BY``; and
tune.toml's restrictions, conditions over macros: ``32 <= BX*BY <= 1024 and (PAD == 0 or BX % 32 != 0)``.

Evaluated with Python's parser and a walk that allows integers, + - * / // % and parentheses,
macro names and sizeof of a scalar type; a condition also ``**``, comparisons (chained too) and
and/or/not: nothing else (no calls, attributes or names of Python). The text's length, its
nesting and every intermediate value are bounded, a macro's value is evaluated once per depth
(macros whose values name others many times fan out no further), and an evaluation visits a
bounded number of nodes, so no expression can exhaust the machine.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from compileiq.core.errors import UsageError
from compileiq.core.metric_ranges import RANGES as METRIC_RANGES
from compileiq.core.text import printable
from compileiq.source.comments import without_comments
from compileiq.source.entry_names import entry_matches, macro_values, with_macros
from compileiq.source.spec import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from compileiq.source.spec import KernelSpec, SourceBundle

SIZEOF = {"char": 1, "bool": 1, "short": 2, "half": 2, "__half": 2, "__nv_bfloat16": 2, "int": 4,
          "unsigned": 4, "float": 4, "int32_t": 4, "uint32_t": 4, "double": 8, "long": 8,
          "int64_t": 8, "uint64_t": 8, "size_t": 8, "float2": 8, "float4": 16, "double2": 16, "signed": 4}
# C's types of several words (LP64, as nvcc's device code): read as one reserved name (`_parse`)
_WORD_TYPES = {"unsigned int": 4, "signed int": 4, "unsigned char": 1, "signed char": 1, "short int": 2,
               "unsigned short": 2, "unsigned short int": 2, "signed short": 2, "signed short int": 2,
               "long int": 8, "signed long": 8, "signed long int": 8, "unsigned long": 8, "unsigned long int": 8,
               "long long": 8, "long long int": 8, "signed long long": 8, "signed long long int": 8,
               "unsigned long long": 8, "unsigned long long int": 8}
_RESERVED = "__ciq_"  # a C name with two leading underscores is the implementation's: no macro of the code
SIZEOF.update({_RESERVED + name.replace(" ", "_"): size for name, size in _WORD_TYPES.items()})
TYPE_NAMES = tuple(name for name in SIZEOF if not name.startswith(_RESERVED))  # one word; the docs list all
_WORDS_SIZEOF = re.compile(r"\bsizeof\s*\(\s*((?:unsigned|signed|short|long|int|char)"
                           r"(?:\s+(?:unsigned|signed|short|long|int|char))+)\s*\)")
_MAX_DEPTH = 8  # macros whose values are expressions naming macros
MAX_TEXT = 1000  # characters of one expression
_MAX_NESTING = 32  # operators within operators (a chain of one precedence level, a + b + c, is one)
_LEVEL = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2, ast.FloorDiv: 2, ast.Mod: 2}  # left-associative levels
_MAX_BITS = 256  # every value on the way, e.g. 2**64**64 is refused, not computed
_MAX_EXPONENT = 256
_MAX_STEPS = 20_000  # nodes one evaluation visits (a macro's value counts once per depth): milliseconds
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}
# What a launch can ask for: tune.toml's block_size and dynamic_smem, top-level and per kernel.
RANGES = {"block_size": (int(METRIC_RANGES["block_size"][1]), int(METRIC_RANGES["block_size"][2])),
          "dynamic_smem": (0, 2**31 - 1)}  # the threads a result may record: one bound, not two
# Each part bounded (an expression is MAX_TEXT characters at most): a `__launch_bounds__(a,` never
# closed scans a bounded stretch, not the rest of the file for each one. Spaces at either end of
# the expression are the caller's to drop.
_LAUNCH_BOUNDS = re.compile(
    rf"__launch_bounds__\s*\(([^,()]{{1,{MAX_TEXT}}}+(?:\([^()]{{0,{MAX_TEXT}}}+\)[^,()]{{0,{MAX_TEXT}}}+){{0,{_MAX_NESTING}}}+)"
    rf"(?:,[^)]{{0,{MAX_TEXT}}}+)?\)\s*(?:void\s+)?([A-Za-z_]\w*)\s*\(")


class ExpressionError(UsageError):
    """An expression that is not plain arithmetic over macros, or names an unknown macro."""


def check(text: str, condition: bool = False) -> None:
    """ExpressionError unless ``text`` parses as an allowed expression (macros not looked up);
    ``condition``: comparisons, and/or/not and ** allowed too (a restriction)."""
    _Walk(None, condition).value(_parse(text), 0)


def evaluate(text: str, macros: Mapping[str, int | str], condition: bool = False) -> int:
    """The expression's integer value (a condition: 1 true, 0 false); a macro's value may itself
    be an expression."""
    return _Walk(macros, condition).value(_parse(text), 0)


def names(text: str) -> set[str]:
    """The macro names an allowed expression reads (``sizeof``'s type is not one)."""
    tree = _parse(text)
    types = {id(n.args[0]) for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_sizeof(n)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in types and n.id != "sizeof"}


def launch_bounds(sources: Mapping[str, str]) -> dict[str, str]:
    """``__launch_bounds__`` max-threads expression per kernel name, from every given source text."""
    found: dict[str, str] = {}
    for text in sources.values():
        for match in _LAUNCH_BOUNDS.finditer(without_comments(text)):
            found.setdefault(match.group(2), " ".join(match.group(1).split()))
    return found


def source_defines(sources: Mapping[str, str]) -> dict[str, str]:
    """Object-like ``#define NAME value`` lines whose value is plain arithmetic."""
    found: dict[str, str] = {}
    pattern = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)$", re.MULTILINE)
    for text in sources.values():
        for name, value in pattern.findall(without_comments(text)):
            value = value.strip()
            try:
                check(value)
            except ExpressionError:
                continue
            found.setdefault(name, value)
    return found


def parsed(text: str) -> ast.expr:
    """The expression's tree (ExpressionError when too long or not Python's syntax); its form
    is `check`'s to judge."""
    return _parse(text)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> ast.expr:
    """Parsed once per text (a restriction is evaluated for every combination `space` counts:
    parsing it again each time was half of each check); the trees are only read, never changed."""
    if len(str(text)) > MAX_TEXT:
        raise ExpressionError(f"{str(text)[:40]!r}...: longer than {MAX_TEXT} characters")
    if (foreign := next((c for c in str(text) if not c.isascii()), None)) is not None:
        # Python reads identifiers NFKC-normalised (fullwidth 'Ａ' is the macro A) where the text, and
        # the ACF that records it, show another name; the C preprocessor never normalises them
        raise ExpressionError(f"{printable(text)[:60]!r} holds {foreign!r} (U+{ord(foreign):04X}), not ASCII: macro "
                              "names are ASCII letters, digits and _")
    cleaned = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", str(text).strip())
    cleaned = _WORDS_SIZEOF.sub(_one_word, cleaned)  # sizeof(unsigned int): one name Python's parser reads
    try:
        return ast.parse(cleaned, mode="eval").body
    except SyntaxError:
        raise ExpressionError(f"{text!r} is not an arithmetic expression") from None
    except (RecursionError, MemoryError):  # the parser's own stack: nested too deeply
        raise ExpressionError(f"{str(text)[:40]!r}...: nested too deeply") from None


def _one_word(match: re.Match[str]) -> str:
    """`sizeof(unsigned  int)` as `sizeof(__ciq_unsigned_int)`; a spelling C has not, as it was."""
    name = " ".join(match.group(1).split())
    return f"sizeof({_RESERVED}{name.replace(' ', '_')})" if name in _WORD_TYPES else match.group(0)


class _Walk:
    """One evaluation: ``macros`` None checks the form alone (every macro reads as 1)."""

    def __init__(self, macros: Mapping[str, int | str] | None, condition: bool) -> None:
        self.macros, self.condition = macros, condition
        self._known: dict[tuple[str, int], int] = {}  # a macro's value, by the depth it was read at
        self._steps = 0

    def value(self, node: ast.expr, depth: int, nesting: int = 0) -> int:
        if nesting > _MAX_NESTING:
            raise ExpressionError(f"nested more than {_MAX_NESTING} deep")
        self._steps += 1
        if self._steps > _MAX_STEPS:
            raise ExpressionError(f"more than {_MAX_STEPS} steps to evaluate (macros that name macros too often)")
        found = self._node(node, depth, nesting + 1)
        if abs(found) >= 1 << _MAX_BITS:
            raise ExpressionError(f"a value larger than 2**{_MAX_BITS}")
        return found

    def _node(self, node: ast.expr, depth: int, nesting: int) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = self.value(node.operand, depth, nesting)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            return self._binary(node, depth, nesting)
        if isinstance(node, ast.Call) and _is_sizeof(node):
            return SIZEOF[node.args[0].id]  # type: ignore[attr-defined]
        if isinstance(node, ast.Name):
            return self._macro(node.id, depth)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sizeof":
            raise ExpressionError(f"{_shown(node)!r}: sizeof takes a scalar type ({', '.join(TYPE_NAMES[:20])}, "
                                  "or C's spellings of several words: unsigned int, long long, unsigned char...)")
        if self.condition:
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                return int(not self.value(node.operand, depth, nesting))
            if isinstance(node, ast.BoolOp):  # and/or stop as Python's do (`B == 0 or A % B == 0`)
                if self.macros is None:  # the form alone: every operand is checked, none skipped
                    checked = [self.value(v, depth, nesting) for v in node.values]
                    return int(all(checked))
                wanted = not isinstance(node.op, ast.And)
                return int(any(bool(self.value(v, depth, nesting)) == wanted for v in node.values) == wanted)
            if isinstance(node, ast.Compare):
                return self._compare(node, depth, nesting)
            raise ExpressionError(f"{_shown(node)!r}: only integers, + - * / // % ** ( ), "
                                  "comparisons, and/or/not, macros and sizeof(type)")
        raise ExpressionError(f"{_shown(node)!r}: only integers, + - * / % ( ), macros and sizeof(type)")

    def _compare(self, node: ast.Compare, depth: int, nesting: int) -> int:
        left = self.value(node.left, depth, nesting)
        verdict = True
        for op, operand in zip(node.ops, node.comparators):
            if type(op) not in _COMPARE:
                raise ExpressionError(f"{_shown(node)!r}: only == != < <= > >= compare")
            right = self.value(operand, depth, nesting)
            verdict = verdict and _COMPARE[type(op)](left, right)
            left = right
        return int(verdict)

    def _binary(self, node: ast.BinOp, depth: int, nesting: int) -> int:
        """A chain of one precedence level (``A1 + A2 + ... + A40``, ``A * B / C``) is one level
        of nesting, evaluated left to right without recursing per term (Python's parser nests
        it to the left, one node per operator: a flat 40-term sum read as nested 40 deep)."""
        level = _LEVEL.get(type(node.op))
        chain = [node]
        while level is not None and isinstance(chain[-1].left, ast.BinOp) and _LEVEL.get(type(chain[-1].left.op)) == level:
            chain.append(chain[-1].left)
        value = self.value(chain[-1].left, depth, nesting)
        for link in reversed(chain):
            value = self._operation(link, value, self.value(link.right, depth, nesting))
            if link is not node:  # the chain's own node is counted and bounded by `value`
                self._count(value)
        return value

    def _count(self, found: int) -> None:
        self._steps += 1
        if self._steps > _MAX_STEPS:
            raise ExpressionError(f"more than {_MAX_STEPS} steps to evaluate (macros that name macros too often)")
        if abs(found) >= 1 << _MAX_BITS:
            raise ExpressionError(f"a value larger than 2**{_MAX_BITS}")

    def _operation(self, node: ast.BinOp, left: int, right: int) -> int:
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod):
            if self.macros is not None and right == 0:
                raise ExpressionError(f"{_shown(node)!r}: division by zero")
            if self.macros is None:
                return 0
            return left % right if isinstance(node.op, ast.Mod) else int(left / right)
        if isinstance(node.op, ast.Pow) and self.condition:
            if not 0 <= right <= _MAX_EXPONENT or left.bit_length() * right > _MAX_BITS:
                raise ExpressionError(f"{_shown(node)!r}: a value larger than 2**{_MAX_BITS}"
                                      if right >= 0 else f"{_shown(node)!r}: a negative exponent")
            return int(left**right)
        allowed = "+ - * / // % **" if self.condition else "+ - * / % "
        raise ExpressionError(f"{_shown(node)!r}: only {allowed.strip()} are allowed")

    def _macro(self, name: str, depth: int) -> int:
        macros = self.macros
        if macros is None:
            return 1
        if name not in macros:
            raise ExpressionError(f"unknown macro {name!r}")
        value = macros[name]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if depth >= _MAX_DEPTH:
            raise ExpressionError(f"macro {name!r} nests too deeply")
        if (name, depth) not in self._known:  # once: a value that names it 230 times reads it once
            self._known[name, depth] = self.value(_parse(str(value)), depth + 1)
        return self._known[name, depth]


def _shown(node: ast.AST) -> str:
    """The start of a node's text for a message (a long chain is too deep for ast.unparse)."""
    try:  # a type of several words as written (`_one_word`)
        text = ast.unparse(node)
        return re.sub(rf"{_RESERVED}(\w+)", lambda m: m.group(1).replace("_", " "), text)[:60]
    except RecursionError:
        return "an expression"


def _is_sizeof(node: ast.Call) -> bool:
    func, args = node.func, node.args
    return (isinstance(func, ast.Name) and func.id == "sizeof" and len(args) == 1 and not node.keywords
            and isinstance(args[0], ast.Name) and args[0].id in SIZEOF)


class LaunchModel:
    """Threads per block and dynamic shared memory of each entry under a config: its [launch]
    table, else the tune.toml block_size, else its ``__launch_bounds__`` (as compiled, else as read
    in any bundled file), else the spec's default."""

    def __init__(self, spec: KernelSpec, bundle: SourceBundle | None = None) -> None:
        texts = {rel: content.decode(errors="replace") for rel, content in (bundle.files if bundle else ())}
        self._spec = spec
        self._enumerators = dict(bundle.enumerators) if bundle is not None else {}
        self._bounds = launch_bounds(texts)
        self._defines = source_defines(texts)
        self.check_defaults()

    def check_defaults(self) -> None:
        """ExpressionError where a [launch] fact fails or leaves its range with the defaults: a
        wrong expression is a usage error before any build (tune), or listing the space (space),
        not a failed trial."""
        defaults = self._spec.default_values()
        for facts in self._spec.launch:
            for fact, text in (("block_size", facts.block_size), ("dynamic_smem", facts.dynamic_smem)):
                if text is not None:
                    self._fact(facts.entry, fact, text, defaults, "with the defaults")

    def _fact(self, entry: str, fact: str, text: str, config: Mapping[str, Any], under: str) -> int:
        """A launch fact outside what a launch can ask for (0 threads, negative bytes) would score
        a variant as no occupancy, or as more than any launch gets: refused (the study at the
        defaults, before any build; a variant whose macros make it so, as that variant's failure)."""
        value = self._evaluate(text, config, f"launch.{entry}.{fact}")
        low, high = RANGES[fact]
        if not low <= value <= high:
            where = f"{self._spec.source.parent / 'tune.toml'}: launch.{entry}.{fact}"
            shown = text if text == str(value) else f"{text!r} is {value} {under}: it"
            raise ExpressionError(f"{where}: {shown} must be from {low} to {high}")
        return value

    def facts(self, entry: str, config: Mapping[str, Any], compiled_bound: int = 0) -> tuple[int, int]:
        """``compiled_bound``: the threads the compiled entry declares (PTX .maxntid), which beats
        reading ``__launch_bounds__`` from the source (a template's parameter, a toolchain header).
        ExpressionError where the config's macros make a [launch] expression fail or leave its range."""
        spec = self._spec
        macros = self._enumerators | macro_values(config, spec.defines)
        table = next((f for f in spec.launch if entry_matches(entry, with_macros(f.entry, macros))), None)
        smem = spec.dynamic_smem
        if table is not None and table.dynamic_smem is not None:
            smem = self._fact(table.entry, "dynamic_smem", table.dynamic_smem, config, "in this variant")
        if table is not None and table.block_size is not None:
            threads = self._fact(table.entry, "block_size", table.block_size, config, "in this variant")
            return _launchable(f"launch.{table.entry}.block_size", threads, compiled_bound, config), smem
        if compiled_bound and not spec.block_size_given:
            return compiled_bound, smem
        if spec.block_size_given:
            return _launchable("block_size", spec.block_size_for(config), compiled_bound, config), smem
        bound = next((b for name, b in self._bounds.items() if entry_matches(entry, name)), None)
        if bound is None:  # never another kernel's bounds: the file's first is the spec's default
            return DEFAULT_BLOCK_SIZE, smem
        try:
            threads = self._evaluate(bound, config, "__launch_bounds__")
        except ExpressionError:
            return DEFAULT_BLOCK_SIZE, smem
        low, high = RANGES["block_size"]  # a bound above 1024 (nvcc only warns) bounds nothing a block can have
        return (threads if low <= threads <= high else DEFAULT_BLOCK_SIZE), smem

    def unscored_facts(self, entry: str, config: Mapping[str, Any], compiled_bound: int = 0) -> tuple[int, int]:
        """`facts` of a kernel tune.toml's `entries` leave unscored (`metrics.unscored_facts`): only a
        [launch] table naming it binds it; tune.toml's block_size, meant for the entries, is capped at
        its compiled bound (a helper's __launch_bounds__(128) under block_size = 256 runs at 128). Never
        raises: an unscored kernel's launch facts never fail the variant."""
        try:
            return self.facts(entry, config, compiled_bound)
        except ExpressionError:
            threads = self._spec.block_size_for(config) if self._spec.block_size_given else DEFAULT_BLOCK_SIZE
            bound, _ = _bound(compiled_bound, config)
            return (min(threads, bound) if bound else threads), self._spec.dynamic_smem

    def _evaluate(self, text: str, config: Mapping[str, Any], where: str) -> int:
        values = {**self._spec.default_values(), **config}
        macros: dict[str, int | str] = {**self._defines, **dict(self._spec.defines)}
        macros.update({k.removeprefix("define."): v for k, v in values.items() if k.startswith("define.")})
        try:
            return evaluate(text, macros)
        except ExpressionError as error:
            raise ExpressionError(f"{self._spec.source.parent / 'tune.toml'}: {where}: {error}") from None


def _launchable(what: str, threads: int, compiled_bound: int, config: Mapping[str, Any]) -> int:
    """`threads`, where a block of them can be launched: not above the bound the compiled entry
    declares (PTX .maxntid: its __launch_bounds__) nor ptxas's --maxntid of this variant (where no
    directive holds, or --override-directive-values lets it win). Above it every launch fails, yet
    its occupancy would be scored as if it ran: ExpressionError, the variant's failure."""
    bound, how = _bound(compiled_bound, config)
    if bound and threads > bound:
        raise ExpressionError(f"{what} is {threads} in this variant, above the {bound} threads per block "
                              f"{how} allows: every launch of it would fail")
    return threads


def ptxas_maxntid(config: Mapping[str, Any]) -> int:
    """ptxas's --maxntid of a config (0: none): it bounds an entry that declares no bound, and with
    --override-directive-values replaces one that does (`overriding_maxntid`)."""
    ptxas = config.get("ptxas.maxntid")
    return ptxas if isinstance(ptxas, int) and not isinstance(ptxas, bool) and ptxas > 0 else 0


def overriding_maxntid(config: Mapping[str, Any]) -> int:
    """The --maxntid that replaces every entry's own __launch_bounds__ in the cubin (its max threads
    per block), where --override-directive-values is on; 0 where none does."""
    return ptxas_maxntid(config) if config.get("ptxas.override_directive_values") is True else 0


def _bound(compiled_bound: int, config: Mapping[str, Any]) -> tuple[int, str]:
    """The most threads per block a launch of the entry may have (0: no bound), and what sets it."""
    ptxas = ptxas_maxntid(config)
    if ptxas and (not compiled_bound or overriding_maxntid(config)):
        return ptxas, f"-Xptxas --maxntid={ptxas}"
    return compiled_bound, "its __launch_bounds__ (PTX .maxntid)"
