"""How an objective's values read: the unit, which way is better, and the number a person sees.

The search minimises every objective; `occupancy` is minimised as its shortfall (1 - occupancy),
but nobody reads "0, lower is better" as full occupancy. Every view (the run's table, `show`,
the report, `--json`, the ACF) takes an objective's unit, direction and shown number from here,
so they all read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

_UNITS = {
    "static": "score: spill bytes x 1000 + occupancy shortfall in per mille",
    "spills": "spill bytes",
    "registers": "registers per thread",
    "occupancy": "theoretical occupancy",
    "instructions": "SASS instructions",
    "time": "ms",
}


@dataclass(frozen=True)
class Reading:
    """One objective as people read it."""

    objective: str
    unit: str
    better: str  # "lower" or "higher"
    minimised_as: str | None = None  # what the recorded value is, where it is not the shown number

    @property
    def heading(self) -> str:
        """"registers per thread, lower is better"; several objectives: each one's, "; "-separated
        (occupancy reads higher is better beside instructions' lower)."""
        if "," in self.objective:
            return "; ".join(reading(name).heading for name in self.objective.split(","))
        return f"{self.unit}, {self.better} is better"

    def shown(self, value: float | None) -> float | None:
        """The number a person reads for a recorded (minimised) value; several objectives: the
        first's reading (a trial's recorded value is the first objective's alone), as the ACF's
        `best_shown` gives it."""
        if "," in self.objective:
            return reading(self.objective.split(",")[0]).shown(value)
        if value is None:
            return None
        return round(1.0 - value, 6) if self.objective == "occupancy" else value

    def text(self, value: float | None) -> str:
        """The shown number as text: occupancy as a percentage, others at full precision."""
        if "," in self.objective:
            return reading(self.objective.split(",")[0]).text(value)
        shown = self.shown(value)
        if shown is None:
            return "-"
        if self.objective == "occupancy":
            return f"{shown:.1%}"
        return exact(shown)


def reading(objective: str) -> Reading:
    """The reading of one objective (several, comma-separated: each has its own; see `readings`)."""
    if objective == "occupancy":
        return Reading(objective, _UNITS[objective], "higher", "1 - occupancy (the shortfall)")
    return Reading(objective, _UNITS.get(objective, objective), "lower")


def exact(value: float) -> str:
    """A value at full precision (the shortest text that reads back as the same number), so that
    two different values never look equal; whole numbers without a decimal point."""
    number = float(value)
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


def gain_text(objective: str, gain: float | None) -> str:
    """A gain in the objective (the decrease of its recorded, minimised value) as people read it:
    occupancy's as occupancy gained ("+50.0%"), any other's as the decrease itself."""
    if gain is None:
        return "-"
    return f"{gain:+.1%}" if objective == "occupancy" else exact(gain)
