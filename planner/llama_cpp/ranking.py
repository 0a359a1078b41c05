"""Rank every llama-server configuration polyplan can predict, and "off", and choose one.

A replayed configuration (`replayed_config`) is one server session over the target's streams,
priced with T(k) and llama-server's own loop. A stateful rule's rounds depend on the order of the
requests, and the profile's order says nothing about a user's, so each session is replayed in
`ORDERS` orders: the point is the median order's, and bootstrap replicate r reads order r mod
`ORDERS`. A race knows the order it sends, so its own prediction replays that one
(`ReplayWorkload.sent`). Each row has an interval for a new prompt set (what a race is judged by) and one for the
workload's mean, whose low end `choose_config` reads (the configuration that pays most surely),
since a server answers many requests.
docs/engines.md, "polyplan export". Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from polyplan.formats.profile import ModelProfile, Profile, TargetStream
from polyplan.planner.intervals.prediction_interval import percentile_interval
from polyplan.planner.llama_cpp.kv_placement import DEFAULT_SLOT_CONTEXT
from polyplan.planner.llama_cpp.near_ties import NearTies, departed
from polyplan.planner.llama_cpp.ngram_rules import DraftRule, SessionReplay, replay_session
from polyplan.planner.llama_cpp.server_loop import NGRAM, NO_SERVER_LOOP, ServerLoop

OFF = "off (no speculation)"
LEVEL = 0.95
ORDERS = 8  # request orders each replayed session is drawn over (module docstring)
LOW_TIE = 0.03  # low ends within this share of the highest are tied and the point decides (`surest`)


@dataclass(frozen=True)
class ReplayWorkload:
    """The requests a replay feeds one server: each stream's first `new_tokens` (all when None),
    the whole list `repeats` times in turn, as `bench peers` sends its prompts."""

    new_tokens: int | None = None
    repeats: int = 1
    prompts: int | None = None  # the size of the new prompt set an interval is for (None: the streams')
    in_order: bool = False  # the streams' own order, not `ORDERS` orders (a race priced on its own prompts)
    to_eos: bool = False  # requests end at the target's end of sequence (or `new_tokens`), not all after `new_tokens`
    slot_context: int = DEFAULT_SLOT_CONTEXT  # tokens of KV per slot (`-c` over `-np`): the size of `--kv-unified`'s stream

    @classmethod
    def sent(cls, new_tokens: int, repeats: int, prompts: int, to_eos: bool = False,
             slot_context: int = DEFAULT_SLOT_CONTEXT) -> ReplayWorkload:
        """What a race sends, priced as it sends it: `prompts` prompts in their file's order,
        `repeats` times, to servers that keep their state between repeats (`bench peers`; under
        load, prompt i by client i mod N). The order is known, so it is replayed, not drawn: which
        requests decode side by side, and what a stateful rule has learnt by each, is the race's."""
        return cls(new_tokens, repeats, prompts, in_order=True, to_eos=to_eos, slot_context=slot_context)

    def words(self, streams: int) -> str:
        tokens = "its whole continuation" if self.new_tokens is None else f"{self.new_tokens} new tokens"
        times = "" if self.repeats == 1 else f", the list {self.repeats} times"
        order = ", in their own order" if self.in_order else ""
        return f"one server serving {streams} target streams in turn ({tokens} each{times}{order})"

    def set_words(self, streams: int) -> str:
        """What the new-set interval is for (`a new set of N prompts`)."""
        return f"a new set of {streams if self.prompts is None else self.prompts} prompts"


@dataclass(frozen=True)
class RankedConfig:
    """One llama-server configuration: its flags after `-m TARGET` (none: off), its predicted
    decode speedup over the target alone, the interval where there is one, and how it was
    predicted. `drafted`/`accepted`: the replay's totals (n-gram types only)."""

    label: str
    flags: tuple[str, ...]
    speedup: float
    interval: tuple[float, float] | None = None  # for a new prompt set of the workload's count (what a race is judged by)
    note: str = ""
    drafted: int | None = None
    accepted: int | None = None
    workload_interval: tuple[float, float] | None = None  # for the workload's mean (one prompt draw: what the choice reads)

    @property
    def low(self) -> float:
        """The low end the recommendation reads: the workload interval's, else the other's, else the point."""
        bounds = self.workload_interval or self.interval
        return self.speedup if bounds is None else bounds[0]

    def text(self) -> str:
        """The speedup and its new-set interval where there is one, as the ranking prints them."""
        return f"{self.speedup:.2f}x" + ("" if self.interval is None else f" [{self.interval[0]:.2f}, {self.interval[1]:.2f}]")


OFF_CONFIG = RankedConfig(OFF, (), 1.0, None, "the target alone")


@dataclass(frozen=True)
class LlamaCppPrices:
    """What a llama.cpp export is priced with, in place of the profile's numbers. Declared here,
    in the pure planner that reads it; filled by `engines.llama_cpp.prices`, which measures it.

    Attributes:
        target: the latency entry (T(k) through the bindings) of the GGUF llama-server loads as
            the target, under any name (the plan's target's is used).
        drafters: by candidate name, the latency entries of GGUF drafters measured the same way.
        streams: the target's greedy streams decoded by llama.cpp (empty: keep the profile's).
        loop: llama-server's own costs (`planner.llama_cpp.server_loop`; None: not calibrated).
        notes: one line each on where the numbers came from, printed with the ranking.
        draft_ratio: a draft model's pass inside llama-server over its T_d(1) through the
            bindings, calibrated on one draft model (None: not calibrated, 1 is used).
        reevaluations: by candidate name, each GGUF draft model's last-row-only pass over k
            tokens (the server's second decode of a verified batch), as a latency entry.
        calibrated_step_s: the target alone's decode step in the calibration (seconds; None: not
            calibrated), which a race's own pace is held against.
        unified: the target's step over several sequences with a KV stream each and with one
            unified stream, in one sitting (`planner.llama_cpp.kv_cells.cell_cost` reads the
            seconds per cell of other slots in a pass's view from it); None: not measured (no
            plan under load asked for).
        near_ties: where a wide verification pass flips the target's answer on the streams
            (`planner.llama_cpp.near_ties`); None: not measured.
        unified_long: `unified` over longer sequences, where a masked cell costs more; None:
            not measured.
        answers: llama-server's own greedy answers at each count of slots measured, as (count,
            streams) (`engines.llama_cpp.server_streams`); a ranking at that count replays its
            rules over them. Empty: the bindings' streams at every count.
    """

    target: ModelProfile
    drafters: Mapping[str, ModelProfile] = field(default_factory=dict)
    streams: tuple[TargetStream, ...] = ()
    loop: ServerLoop | None = None
    notes: tuple[str, ...] = ()
    draft_ratio: float | None = None
    reevaluations: Mapping[str, ModelProfile] = field(default_factory=dict)
    calibrated_step_s: float | None = None
    unified: UnifiedSteps | None = None
    near_ties: NearTies | None = None
    unified_long: UnifiedSteps | None = None
    answers: tuple[tuple[int, tuple[TargetStream, ...]], ...] = ()  # llama-server's own answers at each count of slots

    def applied(self, profile: Profile, target: str) -> Profile:
        """`profile` with these latency curves and streams in place of its own."""
        priced = profile.with_model(dataclasses.replace(self.target, name=target))
        for name, entry in self.drafters.items():
            priced = priced.with_model(dataclasses.replace(entry, name=name))
        return priced.with_streams(self.streams) if self.streams else priced


@dataclass(frozen=True)
class Replicates:
    """What every replayed configuration's interval is drawn from: per replicate, the target's
    T(1..k_max + 1) (`steps[r, k - 1]`) and how often each stream is in its new prompt set."""

    steps: np.ndarray  # [B, K]
    weights: np.ndarray  # [B, streams]: a new prompt set (two draws)
    stretch: float  # the few-prompts stretch of each deviation (`planner.intervals.prediction_interval.few_prompts_stretch`)
    workload: np.ndarray | None = None  # [B, streams]: the profile's prompts resampled alone (the workload's mean, one draw)


def session_speedup(session: SessionReplay, step: Callable[[int], float], loop: ServerLoop = NO_SERVER_LOOP,
                    repeats: int = 1) -> float:
    """Target-only decode time over the session's, each priced with the server's own costs `loop`
    (`planner.llama_cpp.server_loop`; none: the bindings' T(k) alone); over `repeats` equal runs
    of the session's requests (a race's repeats), the mean of each run's, as a race reports them."""
    return float(np.mean([_run_speedup(part, step, loop) for part in repeat_parts(session, repeats)]))


def _run_speedup(session: SessionReplay, step: Callable[[int], float], loop: ServerLoop) -> float:
    rounds = [item for request in session.requests for item in request]
    tokens = sum(item.accepted + 1 for item in rounds)
    fixed = loop.per_request_s * len(session.requests)
    seconds = fixed + sum(step(item.drafted + 1) + loop.round_s(item.drafted, NGRAM) for item in rounds)
    return (fixed + (step(1) + loop.per_round_s) * tokens) / seconds


def repeat_parts(session: SessionReplay, repeats: int) -> list[SessionReplay]:
    """The session's requests in `repeats` equal runs, in order (one run when they do not divide)."""
    count = len(session.requests)
    if repeats <= 1 or count % repeats:
        return [session]
    size = count // repeats
    return [SessionReplay(session.requests[i:i + size], session.stream_of[i:i + size]) for i in range(0, count, size)]


def session_interval(sessions: Sequence[SessionReplay], streams: int, point: float, replicates: Replicates,
                     loop: ServerLoop = NO_SERVER_LOOP, workload: bool = False, repeats: int = 1) -> tuple[float, float]:
    """The percentile interval of the sessions' speedup over `replicates`, replicate r reading
    `sessions[r mod len(sessions)]` with `loop` held fixed; `workload`: over the replicates'
    one-draw weights (the workload's mean) rather than their new prompt sets; over `repeats`
    equal runs of each session, the mean of each run's (`session_speedup`)."""
    parts = [repeat_parts(session, repeats) for session in sessions]
    runs = len(parts[0])
    speedups = np.mean([_replicate_speedups([part[j] for part in parts], streams, replicates, loop, workload)
                        for j in range(runs)], axis=0)
    return percentile_interval(point, speedups, point, replicates.stretch, LEVEL)


def _replicate_speedups(sessions: Sequence[SessionReplay], streams: int, replicates: Replicates, loop: ServerLoop,
                        workload: bool) -> np.ndarray:
    width = replicates.steps.shape[1]
    counts = np.zeros((len(sessions), streams, width))  # rounds per order, stream and round width L + 1
    tokens = np.zeros((len(sessions), streams))
    extra = np.zeros((len(sessions), streams))  # the server's seconds besides T(L + 1), per stream
    requests = np.bincount(sessions[0].stream_of, minlength=streams).astype(float)  # the same in every order
    for order, session in enumerate(sessions):
        for request, stream in zip(session.requests, session.stream_of):
            for item in request:
                counts[order, stream, min(item.drafted, width - 1)] += 1
                tokens[order, stream] += item.accepted + 1
                extra[order, stream] += loop.round_s(item.drafted, NGRAM)
    weights = replicates.workload if workload else replicates.weights
    which = np.arange(weights.shape[0]) % len(sessions)
    fixed = weights @ (requests * loop.per_request_s)
    seconds = (np.einsum("rs,rsk,rk->r", weights, counts[which], replicates.steps)
               + np.einsum("rs,rs->r", weights, extra[which]) + fixed)
    return (fixed + (replicates.steps[:, 0] + loop.per_round_s) * np.einsum("rs,rs->r", weights, tokens[which])) / seconds


def request_orders(streams: int, orders: int) -> list[list[int]]:
    """The given order of `streams` requests, then `orders` - 1 seeded random ones."""
    rng = np.random.default_rng(0)
    return [list(range(streams))] + [[int(i) for i in rng.permutation(streams)] for _ in range(orders - 1)]


def replayed_config(label: str, flags: Sequence[str], streams: Sequence[TargetStream], make_rule: Callable[[], DraftRule],
                    step: Callable[[int], float], workload: ReplayWorkload, replicates: Replicates | None,
                    loop: ServerLoop = NO_SERVER_LOOP, near: NearTies | None = None) -> RankedConfig:
    """`label` predicted by replaying its rule over `streams` as one server session in `ORDERS`
    request orders: the median order's speedup and counts, the interval over all; `near`: the
    streams' near-ties, where a repeated request's remembered answer departs (`near_ties.departed`)."""
    orders = request_orders(len(streams), 1 if workload.in_order else ORDERS)
    sessions = [departed(replay_session(streams, make_rule, new_tokens=workload.new_tokens, repeats=workload.repeats,
                                        order=order), streams, near) for order in orders]
    speedups = [session_speedup(session, step, loop, workload.repeats) for session in sessions]
    median = int(np.argsort(speedups, kind="stable")[len(sessions) // 2])  # the median order (module docstring)
    middle, point = sessions[median], speedups[median]
    interval = None if replicates is None else \
        session_interval(sessions, len(streams), point, replicates, loop=loop, repeats=workload.repeats)
    workload_interval = None if replicates is None or replicates.workload is None else \
        session_interval(sessions, len(streams), point, replicates, loop=loop, workload=True, repeats=workload.repeats)
    return RankedConfig(label, tuple(flags), point, interval, "replayed", middle.drafted, middle.accepted, workload_interval)


def ranked(configs: Sequence[RankedConfig]) -> tuple[RankedConfig, ...]:
    """`configs` and "off", fastest first (off before a configuration predicted at 1.00, to
    rounding: one that never drafts)."""
    rest = [config for config in configs if config.label != OFF]
    return tuple(sorted([OFF_CONFIG, *rest], key=lambda config: (-round(config.speedup, 9), config.label != OFF)))


def choose_config(ranking: Sequence[RankedConfig]) -> RankedConfig:
    """The configuration that pays most surely: of those whose workload interval's low end (its
    point, without one) is above 1.00, the one whose low end is highest (`surest`, the point
    breaking ties); "off" when none pays. Not the highest point: a point that rests on state
    crossing requests (ngram-mod's table surviving until a prompt comes again) moves with the
    prompt set far more than one that rests on each request's own text, and the low end carries
    that (module docstring; docs/engines.md, "polyplan export")."""
    paying = [config for config in ranking if config.label != OFF and config.low > 1.0]
    return surest(paying) if paying else OFF_CONFIG


def surest(configs: Sequence) -> object:
    """Of `configs` (not empty), the one `choose_config` takes: the highest point among those
    whose low end is within `LOW_TIE` of the highest low end. A low end is the interval's lower
    quantile of the bootstrap's replicates, one of their few smallest, which another resampling
    moves by a few ranks: low ends that close do not say which configuration pays more surely
    (docs/engines.md, "polyplan export")."""
    best = max(config.low for config in configs)
    tied = [config for config in configs if config.low >= best * (1.0 - LOW_TIE)]
    return max(tied, key=lambda config: (config.speedup, config.low))


def llama_cpp_spec_flags(method: str, k: int, source: str = "", ngram_sizes: tuple[int, int] | None = None,
                         p_min: float | None = None) -> list[str]:
    """llama-server's flags for one drafter at block size `k`, as the pinned llama.cpp spells them
    (tests/test_engines_llama_cpp.py checks each against its --help): `draft-simple` drafting k
    tokens a round, or up to k behind the confidence stop `p_min`; an n-gram drafter as
    `ngram-simple` at its longest n-gram. A draft model's minimum is 0 (`--spec-draft-n-min 0`):
    near a request's end the server caps a draft at the tokens left and would discard one
    shorter than n-min, and a draft the stop cut short is kept (CHANGELOG.md)."""
    if method == "ngram":
        size_n = (ngram_sizes or (1, 3))[1]
        return ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(size_n), "--spec-ngram-simple-size-m", str(k)]
    return ["--spec-type", "draft-simple", "-md", source, "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0",
            "--spec-draft-p-min", "0" if p_min is None else f"{p_min:g}"]
