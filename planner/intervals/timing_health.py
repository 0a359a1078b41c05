"""Whether a profile's timings can be planned on: the warnings a plan carries when they cannot.

From what the profiler records beside each latency curve (`ModelProfile.timing`: the machine
floor, dropped outliers, the noise budget, threads against cores), one line per problem, so that
`recommend`, plan.json, `validate` and the demo warn instead of planning silently. Several threads
claiming every core stall on any other process (an OpenMP region waits for its slowest thread);
a floor that shifted between models makes their curves, and so the ratio of T's that decides the
chain, not comparable. The rules: docs/profiling.md, "Timing health".
"""

from __future__ import annotations

from polyplan.formats.profile import Profile, TimingHealth

MAX_FLOOR_NOISE = 0.10
MAX_FLOOR_SHIFT = 1.5
_MAX_OUTLIER_SHARE = 0.10


def timing_warnings(profile: Profile) -> tuple[str, ...]:
    """One line per reason the profile's timings are doubtful (empty when none is recorded).
    A machine-wide reason (threads, load) is one line naming every model it hit."""
    lines: list[str] = []
    machine: dict[str, list[str]] = {}  # reason -> models
    floors: dict[str, float] = {}
    for model in profile.models:
        health = model.timing or TimingHealth()
        noise = health.reference_relative_iqr
        if noise is not None and noise > MAX_FLOOR_NOISE:
            lines.append(f"{model.name}: the machine floor was noisy while it was timed (a fixed workload's IQR/median "
                         f"{noise:.1%}, acceptable <= {MAX_FLOOR_NOISE:.0%}); its latency curve is uncertain")
        if health.noise_budget_exhausted:
            lines.append(f"{model.name}: the time budget for repeating noisy rounds ran out with the floor still noisy "
                         f"(re-profile on a quieter machine or with a larger --noise-budget)")
        threads, cpus, load = health.threads, health.cpus, health.load_average
        if threads is not None and cpus is not None and threads > 1 and threads >= cpus:
            reason = (f"timed with {threads} torch threads on {cpus} available core(s); any other process stalls the "
                      f"threads and every timing is inflated erratically (re-profile with --threads 1)")
            machine.setdefault(reason, []).append(model.name)
        elif load is not None and cpus is not None and load > cpus:
            reason = (f"the machine was overloaded when timed (load {load:.1f} on {cpus} core(s)); the latency "
                      f"curves reflect the load, not the models")
            machine.setdefault(reason, []).append(model.name)
        dropped, taken = health.latency_outliers, health.latency_timings
        if dropped is not None and taken is not None and taken > 0 and dropped / taken > _MAX_OUTLIER_SHARE:
            lines.append(f"{model.name}: {dropped} of {taken} timings were outliers (dropped, > {_MAX_OUTLIER_SHARE:.0%}): "
                         f"the machine was disturbed while it was timed")
        median = health.reference_median_s
        if median is not None and median > 0:
            floors[model.name] = float(median)
    lines = [f"{', '.join(names)}: {reason}" for reason, names in machine.items()] + lines
    if len(floors) >= 2:
        slow = max(floors, key=floors.__getitem__)
        fast = min(floors, key=floors.__getitem__)
        shift = floors[slow] / floors[fast]
        if shift > MAX_FLOOR_SHIFT:
            lines.append(f"the machine floor (a fixed workload) was {shift:.1f}x slower while {slow} was timed than while "
                         f"{fast} was (> {MAX_FLOOR_SHIFT:g}x): the load changed between models, so their latency curves "
                         f"are not comparable and the ranking may be wrong")
    return tuple(lines)
