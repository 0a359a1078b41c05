"""How many prompts an interval needs, and the warnings when a profile has fewer.

The profiler's intervals are cluster bootstraps over prompts (`profiler.stats`). With n prompts
there are at most C(2n - 1, n) distinct resamples (1 for n = 1, 126 for n = 5), and a 95%
percentile interval needs at least 40 distinct values to mean anything; so an interval is computed
from `MIN_PROMPTS` prompts or more, and from fewer the profile records none and says why, and
`recommend` warns about a plan made from such a profile.
"""

from __future__ import annotations

from math import comb

from polyplan.formats.profile import Profile

MIN_PROMPTS = 5


def distinct_resamples(prompts: int) -> int:
    """The number of distinct bootstrap resamples of `prompts` clusters."""
    return comb(2 * prompts - 1, prompts) if prompts >= 1 else 0


def enough_for_interval(prompts: int | None) -> bool:
    """Whether a bootstrap interval over `prompts` prompts is worth recording (None: unknown,
    as in profiles written before the rule)."""
    return prompts is None or prompts >= MIN_PROMPTS


def too_few_prompts(prompts: int) -> str | None:
    """The warning a profiling run prints when its prompt set is too small for intervals."""
    if enough_for_interval(prompts):
        return None
    resamples = distinct_resamples(prompts)
    noun = f"{prompts} prompt{'s' if prompts != 1 else ''}"
    return (
        f"{noun}: too few for confidence intervals (a bootstrap over {noun} has {resamples} distinct resample"
        f"{'s' if resamples != 1 else ''}; needs >= {MIN_PROMPTS} prompts); the profile records no "
        "intervals and every number in it rests on these few prompts"
    )


def profile_warning(profile: Profile) -> str | None:
    """The warning for a plan made from a profile measured on too few prompts (its
    `profiler.prompts`, when recorded)."""
    prompts = None if profile.profiler is None else profile.profiler.prompts
    if prompts is None or enough_for_interval(prompts):
        return None
    return (f"the profile was measured on {prompts} prompt(s), too few for confidence intervals (needs >= {MIN_PROMPTS}); "
            "every prediction of this plan rests on them")


def interval_warnings(decoded_prompts: list[tuple[int, int | None]], alpha_prompts: int | None) -> list[str]:
    """One line per estimate (`decoded_prompts`: (K, prompts) of each decoded entry) whose interval was left out for want of prompts."""
    lines = []
    if not enough_for_interval(alpha_prompts):
        lines.append(f"alpha from {alpha_prompts} prompt(s): no interval (needs >= {MIN_PROMPTS} prompts)")
    for k, prompts in decoded_prompts:
        if not enough_for_interval(prompts):
            lines.append(f"K={k}: decoded mu from {prompts} prompt(s): no interval (needs >= {MIN_PROMPTS} prompts)")
    return lines
