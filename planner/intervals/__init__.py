"""polyplan.planner.intervals: how far a prediction can move with the measurement noise.

- `prediction_interval`: bootstrap intervals of a chain's predicted speedup (prompts and timings resampled).
- `interval_coverage`: whether those intervals cover a new prompt set, checked on a profile's own prompts.
- `sample_size`: how many prompts an interval needs, and the warnings when a profile has fewer.
- `timing_health`: whether a profile's timings can be planned on (the warnings a plan carries).
"""
