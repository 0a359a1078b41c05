"""The sampling mode a profile entry, a plan and a report are made for: a temperature (0: greedy),
named in files by its key (``"greedy"``, ``"t1.0"``). `SamplingMode.parse` is the one reader of a
key, so the planner looks keys up exactly; `decoder.sampling.Sampling` adds top-k and top-p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError

GREEDY_KEY = "greedy"


@dataclass(frozen=True)
class SamplingMode:
    """A sampling temperature (0: greedy) and its key in profiles and plans."""

    temperature: float = 0.0

    def __post_init__(self) -> None:
        value = self.temperature
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise PolyplanError(f"temperature: must be a finite number >= 0, got {value!r}")
        object.__setattr__(self, "temperature", float(value))

    @property
    def greedy(self) -> bool:
        """True at temperature 0 (argmax at every level)."""
        return self.temperature == 0.0

    @property
    def key(self) -> str:
        """``"greedy"`` at temperature 0, else ``"t<T>"``."""
        return GREEDY_KEY if self.greedy else f"t{self.temperature}"

    def __str__(self) -> str:
        return self.key

    @classmethod
    def parse(cls, key: str, where: str = "sampling") -> SamplingMode:
        """The mode a key names; one `PolyplanError` naming `where` for anything else
        (``"t0"``, ``"t-1"``, ``"tnan"`` included: a sampled mode has a finite temperature > 0)."""
        if key == GREEDY_KEY:
            return cls(0.0)
        temperature = math.nan
        if isinstance(key, str) and key.startswith("t"):
            try:
                temperature = float(key[1:])
            except ValueError:
                pass
        if not (math.isfinite(temperature) and temperature > 0):
            raise PolyplanError(f"{where}: key {key!r} is neither 'greedy' nor 't<temperature>' (e.g. 't1.0')")
        return cls(temperature)


GREEDY = SamplingMode(0.0)
