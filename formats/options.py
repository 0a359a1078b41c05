"""Range checks of command-line numbers, done before any work (one line naming the option). A block
size beyond `MAX_BLOCK_SIZE` drafts more than any latency curve covers, and the planner's tables grow
with it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from polyplan.formats.errors import PolyplanError

MAX_BLOCK_SIZE = 128
_MAX_SEED = 2**32 - 1


def at_least(value: int | float | None, minimum: int | float, option: str) -> None:
    """`value` (when given) is >= `minimum`."""
    if value is not None and not value >= minimum:
        raise PolyplanError(f"{option}: must be >= {minimum}, got {value}")


def integer_at_least(value: Any, minimum: int, option: str) -> int:
    """`value` if it is an integer (not a bool) >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PolyplanError(f"{option}: must be an integer >= {minimum}, got {value!r}")
    return value


def _in_range(value: int | float | None, low: int | float, high: int | float, option: str) -> None:
    """`value` (when given) lies in [low, high]."""
    if value is not None and not low <= value <= high:
        raise PolyplanError(f"{option}: must be in {low}..{high}, got {value}")


def block_size(value: int | None, option: str) -> None:
    """A block size K (or a bound on it) in 1..MAX_BLOCK_SIZE."""
    _in_range(value, 1, MAX_BLOCK_SIZE, option)


def seed(value: int | None, option: str = "--seed") -> None:
    """A seed numpy's and torch's generators accept."""
    _in_range(value, 0, _MAX_SEED, option)


def unused_without(flag: str, given: Iterable[tuple[str, Any]], why: str) -> None:
    """Options that only mean something with `flag`: giving one without it is an error, not
    something silently ignored. `given`: (option, value) pairs; None means not given."""
    for option, value in given:
        if value is not None:
            raise PolyplanError(f"{option}: only used with {flag} ({why}); drop it or add {flag}")
