"""Which sampling mode to plan for when the user names none: greedy, unless the profile has no
greedy entries at all; then the mode it was measured at (the lowest temperature of several).

A profile measured only at `--temperatures 1` is valid, and `recommend --profile` or `theory
report` on it must not fail for want of a `--sampling` the user never chose (a default may never
fail on valid input): they plan for what the profile holds and say so in one line.
"""

from __future__ import annotations

from polyplan.formats.profile import Profile
from polyplan.formats.sampling import GREEDY_KEY, SamplingMode


def _measured_modes(profile: Profile) -> tuple[str, ...]:
    """The sampling keys the profile's pairs were measured at, lowest temperature first."""
    keys = {key for pair in profile.pairs for key in pair.sampling}
    return tuple(sorted(keys, key=lambda key: SamplingMode.parse(key, f"{profile.source}: pairs").temperature))


def default_sampling(profile: Profile, given: str | None, option: str = "--sampling") -> tuple[str, str | None]:
    """(the sampling key to plan for, a one-line note or None): `given` when the user gave one
    (parsed, so a bad key is one line), else greedy, else the profile's only (or lowest) mode."""
    if given is not None:
        return SamplingMode.parse(given, option).key, None
    modes = _measured_modes(profile)
    if not modes or GREEDY_KEY in modes:
        return GREEDY_KEY, None
    chosen = modes[0]
    measured = "the sampling it was measured at" if len(modes) == 1 else \
        f"the lowest temperature it was measured at ({', '.join(modes)})"
    return chosen, (f"{option}: {profile.source} has no greedy entries; using {chosen}, {measured} "
                    f"(give {option} to choose)")
