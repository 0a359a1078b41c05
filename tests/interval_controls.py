"""Negative controls shared by the interval tests."""

from __future__ import annotations

import numpy as np


def profile_only_weights(prompts: int, resamples: int, rng: np.random.Generator, new_set: bool = True,
                         set_size: int | None = None) -> np.ndarray:
    """A stand-in for `planner.intervals.prediction_interval.prompt_weights` that resamples only the
    profile's own prompts (the error of its mean), never a new prompt set drawn from them, whatever
    it is asked for (the workload interval's draw, `new_set` False, asked for a new set's)."""
    picks = rng.integers(0, prompts, size=(resamples, prompts))
    weights = np.zeros((resamples, prompts))
    np.add.at(weights, (np.arange(resamples)[:, None], picks), 1.0)
    return weights
