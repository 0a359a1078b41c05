"""`polyplan bench peers`: one race harness for every engine raced against polyplan's plan.

`race` runs `Contender`s round-robin, the first being the baseline; `race_rows` reduces the runs to
one `formats.race.RaceRow` per contender. docs/engines.md, "The race harness".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.formats.race import RaceRow
from polyplan.planner.exact.whole_call import CallModel


@dataclass(frozen=True)
class Timed:
    """One prompt run by one contender, as it was timed."""

    tokens: tuple[int, ...]
    seconds: float  # the whole call, prefill included
    target_passes: int | None = None  # forward passes of the target, where counted
    drafted: int = 0
    accepted: int = 0
    decode_s: float | None = None  # the engine's own decode time (prefill excluded), where it reports one
    decoded: int | None = None  # the tokens that decode time covers
    rounds: tuple[tuple[int, int], ...] | None = None  # (drafted, accepted) of each round that drafted, where traced

    @property
    def decode_tokens_per_s(self) -> float | None:
        return self.decoded / self.decode_s if self.decode_s and self.decoded is not None else None


@dataclass(frozen=True)
class RaceRun(Timed):
    """A `Timed` run with who ran which prompt, in which repeat and memory group."""

    label: str = ""
    prompt: int = 0
    category: str = ""
    repeat: int = 0
    group: int = 0


@dataclass(frozen=True)
class Contender:
    """One configuration raced: its label, prediction and how to run a prompt."""

    label: str
    args: tuple[str, ...] = ()  # a llama-server's flags after `-m TARGET`
    predicted_speedup: float | None = None
    exported: bool = False
    predicted_interval: tuple[float, float] | None = None
    race_priced: float | None = None  # the prediction priced on the race's own prompts
    run: Callable[[Sequence[int]], Timed] | None = None
    call: CallModel | None = None  # its whole-call cost (`planner.exact.whole_call`), where modelled
    tolerance: float | None = None  # a relative error its prediction promises to stay within
    unjudged: str | None = None  # why it has no prediction, where "not modelled" would mislead
    predicted_tokens_per_pass: float | None = None


def category_of(kind: str) -> str:
    """A prompt's category: its kind, without the `spec_bench:` prefix."""
    return kind.split(":", 1)[1] if kind.startswith("spec_bench:") else kind


def race(contenders: Sequence[Contender], prompts, *, repeats: int, warm_up: bool = False, group: int = 0,
         log: Callable[[str], None] = lambda line: None,
         on_run: Callable[[int, int, str], None] | None = None) -> tuple[list[RaceRun], dict[str, str]]:
    """Run each contender on each of `prompts` `repeats` times, in an order rotated for each prompt
    so that drifts of the machine fall on all alike; with `warm_up`, one untimed run each first.
    `on_run(done, total, label)` hears of every run as it ends (warm-ups included; a contender that
    fails takes its runs left out of `total`), so a caller can say how long the race has left.

    Returns every run but those of a contender that failed (its `run` raised PolyplanError), and
    by label why each failed.

    Raises:
        PolyplanError: the baseline (the first contender) failed.
    """
    runs: list[RaceRun] = []
    failures: dict[str, str] = {}
    rounds = len(prompts) * (repeats + (1 if warm_up else 0))  # runs of each contender
    count = _RunCount(len(contenders) * rounds, on_run or (lambda done, total, label: None))
    if warm_up:
        for prompt in prompts:
            for contender in contenders:
                contender.run(prompt.ids)
                count.ran(f"warm-up: {contender.label}")
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            shift = (repeat * len(prompts) + index) % len(contenders)
            for contender in [*contenders[shift:], *contenders[:shift]]:
                if contender.label in failures:
                    continue
                try:
                    timed = contender.run(prompt.ids)
                except PolyplanError as error:
                    if contender is contenders[0]:
                        raise
                    failures[contender.label] = f"stopped answering: {error}"
                    log(f"{contender.label}: {failures[contender.label]}")
                    count.drop(len(prompts) * (repeats - repeat) - index - 1)  # its runs after this one
                    count.ran(contender.label)
                    continue
                runs.append(RaceRun(**vars(timed), label=contender.label, prompt=index, category=category_of(prompt.prompt.kind),
                                    repeat=repeat, group=group))
                count.ran(contender.label)
        log(f"repeat {repeat + 1}/{repeats} done")
    return [run for run in runs if run.label not in failures], failures


class _RunCount:
    """The runs a race has made out of how many it will make, told to `report(done, total, label)`."""

    def __init__(self, total: int, report: Callable[[int, int, str], None]) -> None:
        self.done, self.total, self.report = 0, total, report

    def ran(self, label: str) -> None:
        self.done += 1
        self.report(self.done, self.total, label)

    def drop(self, runs: int) -> None:
        self.total -= runs


def race_rows(contenders: Sequence[Contender], runs: Sequence[RaceRun], failures: Mapping[str, str] = {}, *,
              category: str = "all", pooled: bool = False, groups: Mapping[str, int] = {}) -> tuple[RaceRow, ...]:
    """A row per contender, each run paired with the baseline's run of the same group, prompt and
    repeat (of `category`'s runs unless "all"). The speedup is the mean of the paired tokens/s
    ratios, or with `pooled` Spec-Bench's (summed tokens/s; sd over repeats). A contender in
    `failures` gets a row saying why; `groups`: the memory group each raced in."""
    if category != "all":
        runs = [run for run in runs if run.category == category]
    baseline = contenders[0].label
    rows = []
    for contender in contenders:
        known = dict(predicted_speedup=contender.predicted_speedup, predicted_interval=contender.predicted_interval,
                     exported=contender.exported, race_priced=contender.race_priced, tolerance=contender.tolerance,
                     unjudged=contender.unjudged, predicted_tokens_per_pass=contender.predicted_tokens_per_pass,
                     category=category, group=groups.get(contender.label))
        if contender.label in failures:
            rows.append(RaceRow(contender.label, failure=failures[contender.label], **known))
        else:
            rows.append(dataclasses.replace(_row(contender.label, runs, baseline, pooled), **known))
    return tuple(rows)


def _row(label: str, runs: Sequence[RaceRun], baseline: str, pooled: bool) -> RaceRow:
    """`label`'s measured row (see `race_rows`)."""
    mine = [run for run in runs if run.label == label]
    base = {(run.group, run.prompt, run.repeat): run for run in runs if run.label == baseline}
    pairs = [(run, base[(run.group, run.prompt, run.repeat)]) for run in mine]
    speedup, sd = _speedup(pairs, pooled)
    decode = [run.decode_tokens_per_s / other.decode_tokens_per_s for run, other in pairs
              if run.decode_tokens_per_s and other.decode_tokens_per_s]
    equal = [run.tokens == other.tokens for run, other in pairs]
    difference = next((f"prompt {run.prompt}: first differs at new token {_first_difference(run.tokens, other.tokens)}"
                       for run, other in pairs if run.tokens != other.tokens), None)
    drafted = sum(run.drafted for run in mine)
    passes = [run.target_passes for run in mine]
    decode_rates = [run.decode_tokens_per_s for run in mine if run.decode_tokens_per_s is not None]
    categories = sorted({run.category for run in mine})
    tokens = sum(len(run.tokens) for run in mine)
    return RaceRow(
        label, speedup, sd, len(mine), tokens, tokens / sum(run.seconds for run in mine),
        target_passes=sum(passes) if passes and None not in passes else None,
        decode_tokens_per_s=statistics.median(decode_rates) if decode_rates else None,
        decode_speedup=statistics.fmean(decode) if decode and len(decode) == len(mine) else None,
        decode_speedup_sd=statistics.stdev(decode) if len(decode) > 1 else 0.0,
        accepted_per_drafted=sum(run.accepted for run in mine) / drafted if drafted else None,
        equal_outputs=sum(equal), first_difference=difference,
        by_category=tuple((name, _speedup([(run, other) for run, other in pairs if run.category == name], pooled)[0])
                          for name in categories))


def _speedup(pairs: Sequence[tuple[RaceRun, RaceRun]], pooled: bool) -> tuple[float, float]:
    """The speedup of paired (run, baseline run)s and its sd (see `race_rows`)."""
    def rate(runs) -> float:
        return sum(len(run.tokens) for run in runs) / sum(run.seconds for run in runs)

    if pooled:
        repeats = sorted({run.repeat for run, _ in pairs})
        ratios = [rate([run for run, _ in pairs if run.repeat == r]) / rate([other for run, other in pairs if run.repeat == r])
                  for r in repeats]
        speedup = rate([run for run, _ in pairs]) / rate([other for _, other in pairs])
    else:
        ratios = [rate([run]) / rate([other]) for run, other in pairs]
        speedup = statistics.fmean(ratios) if ratios else math.nan
    return speedup, statistics.stdev(ratios) if len(ratios) > 1 else 0.0


def _first_difference(tokens: Sequence[int], other: Sequence[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), min(len(tokens), len(other)))
