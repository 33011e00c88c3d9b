"""What changed in tune.toml since the tuning, where the ACF records it: its launch (the one its
evidence was scored at) and its entries (`[kernel] entries`), against the ones the rebuild was
scored under. The settings hash alone says that something changed, not what: a `stale-settings`
finding names each change found here, and keeps the hashes where none is (tolerances, tuned
macros' lists, run arguments: the ACF records them only in the hash)."""

from __future__ import annotations

from dataclasses import dataclass

from compileiq.gating.recorded_launch import RecordedLaunch


@dataclass(frozen=True)
class Change:
    """One tune.toml setting the ACF records, as it was tuned and as the kernel's settings give it now."""

    name: str  # as tune.toml spells it: "block_size", "[launch.scan] dynamic_smem", "entries"
    was: str
    now: str

    @property
    def text(self) -> str:
        return f"{self.name} {self.was} -> {self.now}"


def launch_changes(was: RecordedLaunch | None, now: RecordedLaunch | None) -> tuple[Change, ...]:
    """How the launch the rebuild was scored at (`now`) departs from the one the evidence records
    (`was`); none where either is unknown (an older ACF records no dynamic shared memory: its block
    size alone is compared)."""
    if was is None or now is None or was == now:
        return ()
    if not was.by_kernel and not now.by_kernel:
        return _facts("", (was.threads, was.dynamic_smem), (now.threads, now.dynamic_smem))
    old, new = ({name: (threads, smem) for name, threads, smem in launch.by_kernel} for launch in (was, now))
    if old and new and old.keys() == new.keys():
        return tuple(change for name in old for change in _facts(f"[launch.{name}] ", old[name], new[name]))
    return (Change("launch", f"({was.text})", f"({now.text})"),) if was.text != now.text else ()


def entries_change(was: tuple[str, ...] | None, now: tuple[str, ...]) -> tuple[Change, ...]:
    """The kernels the objective scores, where the ACF records them (None: an older ACF's, not recorded)."""
    if was is None or tuple(was) == tuple(now):
        return ()
    return (Change("entries", _listed(was), _listed(now)),)


def _facts(prefix: str, was: tuple[int, int | None], now: tuple[int, int | None]) -> tuple[Change, ...]:
    found = [Change(f"{prefix}block_size", str(was[0]), str(now[0]))] * (was[0] != now[0])
    if was[1] is not None and now[1] is not None and was[1] != now[1]:
        found.append(Change(f"{prefix}dynamic_smem", str(was[1]), str(now[1])))
    return tuple(found)


def _listed(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{name}"' for name in names) + "]"
