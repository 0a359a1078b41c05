"""The field checks the records of polyplan's files name in their metadata (`formats.codec.spec`,
or `Annotated` where a field cannot): each takes the decoded value and raises `codec.Invalid`
naming the problem, or returns a normalised value (`mode_key`, `sorted_names`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyplan.formats.codec import Before, Invalid, show
from polyplan.formats.errors import PolyplanError
from polyplan.formats.sampling import SamplingMode

MAX_SECONDS = 1e6  # bound on a timed pass: larger values overflow the planner's sums to inf

Check = Callable[[Any], Any]


def whole(minimum: int) -> Check:
    """An integer >= `minimum` (the codec has checked the type)."""
    return at_least(minimum, "an integer ")


def non_negative(value: float) -> None:
    if value < 0:
        raise Invalid(f"must be >= 0, got {value:g}")


def positive(value: float) -> None:
    if value <= 0:
        raise Invalid(f"must be > 0, got {value:g}")


def seconds(value: float) -> None:
    """A timed pass: > 0 s and at most `MAX_SECONDS`."""
    positive(value)
    if value > MAX_SECONDS:
        raise Invalid(f"must be at most {MAX_SECONDS:g} s (a forward pass of days is not a timing), got {value:g}")


def probability(value: float) -> None:
    """An acceptance rate: in [0, 1)."""
    if not 0.0 <= value < 1.0:
        raise Invalid(f"must be in [0, 1), got {value:g}")


def within(low: float, high: float) -> Check:
    def check(value: float) -> None:
        if not low <= value <= high:
            raise Invalid(f"must be in [{low:g}, {high:g}], got {value:g}")

    return check


def at_least(low: float, kind: str = "") -> Check:
    """A number >= `low`; `kind` names what it must be in the message ("an integer ")."""

    def check(value: float) -> None:
        if value < low:
            raise Invalid(f"must be {kind}>= {low:g}, got {value:g}")

    return check


def one_of(*allowed: str) -> Check:
    """One of the strings `allowed`."""

    def check(value: str) -> None:
        if value not in allowed:
            raise Invalid(f"must be one of {', '.join(map(show, allowed))}, got {show(value)}")

    return check


def text(value: str) -> None:
    """A non-empty string (not only blanks)."""
    if not value.strip():
        raise Invalid(f"must be a non-empty string, got {show(value)}")


def each(*checks: Check) -> Check:
    """`checks` on every item of a sequence (the problem names the item's index)."""

    def check(values: Sequence[Any]) -> None:
        for index, value in enumerate(values):
            for item_check in checks:
                try:
                    item_check(value)
                except Invalid as invalid:
                    raise Invalid(invalid.problem, f"[{index}]{invalid.at}") from None

    return check


def non_empty(what: str) -> Check:
    """A sequence or map holding at least one `what`."""

    def check(values: Sequence[Any] | Mapping[str, Any]) -> None:
        if not values:
            raise Invalid(f"must hold at least one {what}")

    return check


def interval_in(low: float | None = None, high: float | None = None) -> Check:
    """A [low, high] pair with low <= high, optionally within bounds."""

    def check(value: tuple[float, float]) -> None:
        interval_within(value, low, high)

    return check


def interval_within(value: tuple[float, float], low: float | None = None, high: float | None = None) -> None:
    lo, hi = value
    if lo > hi:
        raise Invalid(f"low {lo:g} is above high {hi:g}")
    if (low is not None and lo < low) or (high is not None and hi > high):
        bounds = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
        raise Invalid(f"must lie within {bounds}, got [{lo:g}, {hi:g}]")


def mode_key(value: str) -> str:
    """A sampling mode's key (`formats.sampling`), in its canonical form ("t1" reads as "t1.0")."""
    try:
        return SamplingMode.parse(value, "key").key
    except PolyplanError as error:
        raise Invalid(str(error).removeprefix("key: ")) from None


def quantiles(value: Mapping[str, float]) -> None:
    """Quantiles of a rate: keyed by probability levels ("0.5"), each value in [0, 1]."""
    for level, quantile in value.items():
        try:
            probability_level = float(level)
        except ValueError:
            probability_level = math.nan
        if not 0.0 <= probability_level <= 1.0:
            raise Invalid(f"key {level!r} is not a probability in [0, 1]")
        if not 0.0 <= quantile <= 1.0:
            raise Invalid(f"must be in [0, 1], got {quantile:g}", f".{level}")


def bits(value: Sequence[str]) -> None:
    """Strings of 0 and 1 (one per position)."""
    if any(set(item) - {"0", "1"} for item in value):
        raise Invalid("strings of 0 and 1 only")


def hex_bytes(value: Sequence[str]) -> None:
    """Strings of two-digit lowercase hexadecimal numbers (one per position)."""
    if any(len(item) % 2 or set(item) - set("0123456789abcdef") for item in value):
        raise Invalid("strings of two-digit hexadecimal numbers (00 to ff) only")


def sorted_names(value: Sequence[str]) -> tuple[str, ...]:
    """Names kept once each, sorted."""
    return tuple(sorted(set(value)))


def _one_or_many(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


ONE_OR_MANY = Before(_one_or_many)  # one number reads as a list of one
