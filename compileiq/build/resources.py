"""What ptxas says each function uses (`ptxas -v`: registers, spills, stack, shared memory,
barriers) and the thread bounds each PTX entry declares: one record per function, read here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from compileiq.core.metric_ranges import RANGES


@dataclass(frozen=True)
class EntryResources:
    name: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int
    barriers: int
    instructions: int
    entry: bool = True  # False: a device function ptxas compiled on its own (not inlined) for calls
    max_threads: int = 0  # the PTX entry's .maxntid/.reqntid (its __launch_bounds__, templates too); 0: none

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes



_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"Used (\d+) registers")
# the clauses after it, each looked for on its own: ptxas 13.0 puts others between them ("used 1
# barriers, 256 bytes cumulative stack size, 48000 bytes smem, 380 bytes cmem[0]")
_BARRIERS = re.compile(r", used (\d+) barriers")
_SMEM = re.compile(r", (\d+) bytes smem")


_PTX_ENTRY = re.compile(rb"\.entry\s+([\w$.]+)\s*\([^)]*\)([^{]*)\{")
_THREAD_BOUND = re.compile(rb"\.(?:maxntid|reqntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")


def thread_bounds(ptx: bytes) -> dict[str, int]:
    """Threads per block each PTX entry declares (``.maxntid x, y, z``: its __launch_bounds__, as
    the compiler evaluated it, for a template's instances too), by entry name; entries without one
    are left out, and so are those that declare more than a block may have (nvcc only warns about
    `__launch_bounds__(4096)`, which bounds nothing)."""
    bounds = {}
    for match in _PTX_ENTRY.finditer(ptx):
        if found := _THREAD_BOUND.search(match.group(2)):
            threads = 1
            for dimension in found.groups():
                threads *= int(dimension or 1)
            if 0 < threads <= RANGES["block_size"][2]:
                bounds[match.group(1).decode(errors="replace")] = threads
    return bounds


def parse_resources(report: str, instructions: dict[str, int]) -> tuple[EntryResources, ...]:
    """Parse `ptxas -v` output: one record per entry function, then one per device function that
    ptxas compiled on its own (a `__noinline__` callee: a "Function properties" block with its own
    stack frame and spills, and no register line), so that no function's spills go uncounted."""
    entries: list[EntryResources] = []
    frames: dict[str, dict[str, int]] = {}
    current: str | None = None  # the entry being compiled
    described: str | None = None  # the function whose properties come next
    for line in report.splitlines():
        if match := _ENTRY.search(line):
            current = described = match.group(1)
        elif match := _PROPERTIES.search(line):
            described = match.group(1)
        elif (match := _FRAME.search(line)) and described is not None:
            frames[described] = {"stack": int(match[1]), "stores": int(match[2]), "loads": int(match[3])}
        elif (match := _USED.search(line)) and current is not None:
            entries.append(_entry(current, frames.get(current, {}), int(match[1]), line, instructions))
            current = None
    names = {entry.name for entry in entries}
    functions = [_function(name, frame, instructions) for name, frame in frames.items() if name not in names]
    return (*entries, *functions)


def _entry(name: str, frame: dict[str, int], registers: int, used: str, counts: dict[str, int]) -> EntryResources:
    barriers, smem = _BARRIERS.search(used), _SMEM.search(used)
    return EntryResources(
        name=name,
        registers=registers,
        spill_store_bytes=frame.get("stores", 0),
        spill_load_bytes=frame.get("loads", 0),
        stack_bytes=frame.get("stack", 0),
        shared_bytes=int(smem[1]) if smem else 0,
        barriers=int(barriers[1]) if barriers else 0,
        instructions=counts.get(name, 0),
    )


def _function(name: str, frame: dict[str, int], counts: dict[str, int]) -> EntryResources:
    return EntryResources(name, 0, frame["stores"], frame["loads"], frame["stack"], 0, 0, counts.get(name, 0),
                          entry=False)
