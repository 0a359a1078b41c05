"""plan.json: the plan `polyplan recommend` writes and the decoder, `validate` and `generate --plan`
read: its types and its one JSON codec (see `planner.plan_file` for the math that builds one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyplan.formats.errors import PolyplanError


@dataclass(frozen=True)
class VerifyWidths:
    """At which width a verification pass over k tokens runs: `pads` lists (k, width) with
    width > k, k increasing; every other k runs at width k."""

    pads: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        ks = [k for k, _ in self.pads]
        if any(b <= a for a, b in zip(ks, ks[1:])):
            raise PolyplanError(f"verify_widths: k values must increase, got {ks}")
        for k, width in self.pads:
            if isinstance(k, bool) or isinstance(width, bool) or not isinstance(k, int) or not isinstance(width, int):
                raise PolyplanError(f"verify_widths: ({k!r}, {width!r}) must be integers")
            if not 1 <= k < width:
                raise PolyplanError(f"verify_widths: width {width} for {k} tokens must be larger than {k} >= 1")

    def width(self, k: int) -> int:
        """The width a pass over `k` tokens runs at (k itself unless padded)."""
        for tokens, width in self.pads:
            if tokens == k:
                return width
        return k

    @property
    def max_padding(self) -> int:
        """The most extra tokens one padded pass adds (0 when none)."""
        return max((width - k for k, width in self.pads), default=0)

    def to_json(self) -> list[list[int]]:
        return [[k, width] for k, width in self.pads]


NO_PADDING = VerifyWidths()


def verify_widths_from_json(value: Any, where: str) -> VerifyWidths:
    """`VerifyWidths` from its JSON form [[k, width], …]; `PolyplanError` naming `where`."""
    if not isinstance(value, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in value):
        raise PolyplanError(f"{where}: must be a list of [k, width] pairs")
    try:
        return VerifyWidths(tuple((pair[0], pair[1]) for pair in value))
    except PolyplanError as error:
        raise PolyplanError(f"{where}: {str(error).removeprefix('verify_widths: ')}") from None
