"""Whether a profile's timings can be planned on: the warnings a plan carries when they cannot.

From what the profiler records beside each latency curve (`ModelProfile.timing`: the machine
floor, dropped outliers, the noise budget, threads against cores), one line per problem naming
every model it hit, so that `recommend`, plan.json, `validate` and the demo warn instead of
planning silently, and say a machine-wide problem once. Several threads
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
    """One line per reason the profile's timings are doubtful, naming every model it hit (empty
    when none is recorded): a machine's floor, threads or load are one finding however many models
    were timed under them, so a user reads each once."""
    noisy: dict[str, float] = {}
    exhausted: list[str] = []
    outliers: dict[str, tuple[int, int]] = {}
    threaded: dict[tuple[int, int], list[str]] = {}  # (threads, cores) -> models
    loaded: dict[tuple[str, int], list[str]] = {}  # (load, cores) -> models
    floors: dict[str, float] = {}
    for model in profile.models:
        health = model.timing or TimingHealth()
        noise = health.reference_relative_iqr
        if noise is not None and noise > MAX_FLOOR_NOISE:
            noisy[model.name] = noise
        if health.noise_budget_exhausted:
            exhausted.append(model.name)
        threads, cpus, load = health.threads, health.cpus, health.load_average
        if threads is not None and cpus is not None and threads > 1 and threads >= cpus:
            threaded.setdefault((threads, cpus), []).append(model.name)
        elif load is not None and cpus is not None and load > cpus:
            loaded.setdefault((f"{load:.1f}", cpus), []).append(model.name)
        dropped, taken = health.latency_outliers, health.latency_timings
        if dropped is not None and taken is not None and taken > 0 and dropped / taken > _MAX_OUTLIER_SHARE:
            outliers[model.name] = (dropped, taken)
        median = health.reference_median_s
        if median is not None and median > 0:
            floors[model.name] = float(median)
    # the threads are polyplan's one setting: torch's, and a llama.cpp member's (an OpenMP region too)
    lines = [f"{_names(names)} {_were(names)} timed with {threads} threads on {cpus} available core(s); any other process "
             f"stalls the threads and every timing is inflated erratically (re-profile with --threads 1)"
             for (threads, cpus), names in threaded.items()]
    lines += [f"the machine was overloaded (load {load} on {cpus} core(s)) while {_names(names)} {_were(names)} timed; "
              f"the latency curves reflect the load, not the models" for (load, cpus), names in loaded.items()]
    if noisy:
        low, high = min(noisy.values()), max(noisy.values())
        spread = f"{low:.1%}" if f"{low:.1%}" == f"{high:.1%}" else f"{low:.1%}-{high:.1%}"
        lines.append(f"the machine floor was noisy while {_names(noisy)} {_were(noisy)} timed (a fixed workload's IQR/median "
                     f"{spread}, acceptable <= {MAX_FLOOR_NOISE:.0%}); {_their(noisy)} uncertain")
    if exhausted:
        lines.append(f"the time budget for repeating noisy rounds ran out with the floor still noisy while {_names(exhausted)} "
                     f"{_were(exhausted)} timed (re-profile on a quieter machine or with a larger --noise-budget)")
    if outliers:
        counts = ", ".join(f"{name} {dropped} of {taken}" for name, (dropped, taken) in outliers.items())
        lines.append(f"more than {_MAX_OUTLIER_SHARE:.0%} of the timings were outliers (dropped: {counts}): the machine was "
                     f"disturbed while {_names(outliers)} {_were(outliers)} timed")
    if len(floors) >= 2:
        slow = max(floors, key=floors.__getitem__)
        fast = min(floors, key=floors.__getitem__)
        shift = floors[slow] / floors[fast]
        if shift > MAX_FLOOR_SHIFT:
            lines.append(f"the machine floor (a fixed workload) was {shift:.1f}x slower while {slow} was timed than while "
                         f"{fast} was (> {MAX_FLOOR_SHIFT:g}x): the load changed between models, so their latency curves "
                         f"are not comparable and the ranking may be wrong")
    return tuple(lines)


def _names(names) -> str:
    """`a`, `a and b`, `a, b and c`."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _were(names) -> str:
    return "was" if len(names) == 1 else "were"


def _their(names) -> str:
    return "its latency curve is" if len(names) == 1 else "their latency curves are"
