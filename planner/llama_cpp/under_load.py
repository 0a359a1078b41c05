"""llama-server under load: every configuration the export ranks, priced with B requests in flight.

llama-server with B slots serves B clients, each sending its share of the requests back to back
(request i of the workload to client i mod B). The server runs in lock-step iterations: every
decoding slot adds its sampled token and its draft to one target decode, and a slot with a new
prompt adds the prompt's rows to the same decode, which llama.cpp splits into passes of equal rows
per slot where the slots keep their own KV streams (`ubatches`); an iteration costs those passes'
T(rows) plus each decoding slot's own loop costs (`planner.llama_cpp.server_loop`). A replayed
configuration (`planner.llama_cpp.ranking.replayed_config`) is simulated iteration by iteration
over its replayed rounds (`simulate_load`), and so, from two requests up, is a draft model's, on
its rounds replayed from the agreement sequences (`planner.llama_cpp.draft_replay`) with its
batched draft (`DraftBatch`); at one request a draft model's row is the exact model's price, and
where its rounds cannot be replayed it is priced on loaded curves, T_B(k) = T(B·k) / B
(`LoadedCurve`), with the other slots' prompts as stalls. The speedup is aggregate decode throughput (all requests' decoded
tokens over the union of their decode intervals) over the target alone's at the same B; at B = 1
every figure is `planner.llama_cpp.export.rank_server_configs`'s. The model, its assumptions and
what it leaves out: docs/cost-model.md, "Under load: B requests in flight". Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import ModelProfile, TargetStream
from polyplan.formats.sampling import SamplingMode
from polyplan.planner.exact.cost_model import ChainPrediction, ChainSettings
from polyplan.planner.exact.latency import LatencyCurve, curve_from_profile
from polyplan.planner.exact.ngram_replay import ReplayRound, target_streams
from polyplan.planner.intervals.prediction_interval import pair_replicates, percentile_interval
from polyplan.planner.llama_cpp.export import (RESAMPLES, DraftPricing, RacedDraft, ServerRanking, policy_stop,
                                               raced_draft_configs, ranking_replicates)
from polyplan.planner.llama_cpp.near_ties import departed
from polyplan.planner.llama_cpp.ngram_rules import (LLAMA_CPP_RULES, DraftRule, NGramSimpleRule, SessionReplay, replay_session,
                                                    rule_for_flags, serve_slots)
from polyplan.planner.llama_cpp.policy import draft_simple_flags
from polyplan.planner.llama_cpp.ranking import (LEVEL, OFF, ORDERS, RankedConfig, Replicates, choose_config, surest,
                                                llama_cpp_spec_flags, ranked, request_orders)
from polyplan.planner.llama_cpp.draft_replay import draft_sessions
from polyplan.planner.llama_cpp.kv_cells import CellCost
from polyplan.planner.llama_cpp.kv_placement import DEFAULT_SLOT_CONTEXT, UnifiedStream
from polyplan.planner.llama_cpp.server_loop import DRAFT_MODEL, NGRAM, NO_SERVER_LOOP, TARGET_ALONE, ServerLoop

if TYPE_CHECKING:
    from polyplan.planner.engine_export import EngineOption


def parse_clients(text: str, option: str) -> tuple[int, ...]:
    """"1,2,4" as (1, 2, 4), sorted and unique.

    Raises:
        PolyplanError: one line naming `option` for an empty list, a non-integer, 0 or a negative.
    """
    parts = [part.strip() for part in str(text).split(",")]
    if not any(parts):
        raise PolyplanError(f"{option}: give one or more client counts, such as 1,2,4")
    counts = []
    for part in parts:
        if not part.lstrip("+").isdigit():
            raise PolyplanError(f"{option}: {part!r} is not a whole number of concurrent requests (such as 1,2,4)")
        if int(part) < 1:
            raise PolyplanError(f"{option}: {part} concurrent requests; each count must be at least 1")
        counts.append(int(part))
    return tuple(sorted(set(counts)))


@dataclass(frozen=True)
class LoadedConfig:
    """One configuration at `clients` requests in flight: its speedup (aggregate decode
    throughput over the target alone's at the same count), its two intervals where there are
    any (`planner.llama_cpp.ranking.RankedConfig`), the predicted aggregate decode tokens/s and
    mean per-request decode speed, and how it was predicted."""

    label: str
    flags: tuple[str, ...]
    clients: int
    speedup: float
    interval: tuple[float, float] | None  # for a new prompt set
    workload_interval: tuple[float, float] | None  # for the workload's mean (what the choice reads)
    tokens_per_s: float  # predicted aggregate decode tokens/s
    request_tokens_per_s: float  # predicted mean per-request decode speed
    note: str = ""
    overlap: float | None = None  # simulated requests decoding at once (`LoadRun.overlap`); None: not simulated

    @property
    def low(self) -> float:
        """The low end the recommendation reads: the workload interval's, else the other's, else the point."""
        bounds = self.workload_interval or self.interval
        return self.speedup if bounds is None else bounds[0]

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The interval a tie is read in: the workload interval, else the new-set one."""
        return self.workload_interval or self.interval

    def text(self) -> str:
        """The speedup and its new-set interval where there is one."""
        return f"{self.speedup:.2f}x" + ("" if self.interval is None else f" [{self.interval[0]:.2f}, {self.interval[1]:.2f}]")


@dataclass(frozen=True)
class LoadRanking:
    """Every configuration at `clients` requests in flight, fastest first ("off" included), the
    choice (`planner.llama_cpp.ranking.choose_config`'s rule over those and the fastest with
    `--kv-unified`, `unified`), the physical limit at this count (`load_limit`) and the target
    alone's predicted aggregate decode tokens/s."""

    clients: int
    configs: tuple[LoadedConfig, ...]
    chosen: LoadedConfig
    limit: float
    target_tokens_per_s: float
    notes: tuple[str, ...] = ()
    unified: LoadedConfig | None = None  # the fastest with `--kv-unified` (`_Ranker.unified`): not in `configs`, chosen where it wins
    unified_attention: bool = False  # whether that row's reading of every slot's KV cells is priced (`kv_cells`)

    def config(self, label: str) -> LoadedConfig | None:
        """The row labelled `label`, the `--kv-unified` one included (None: not priced at this count)."""
        return next((config for config in (*self.configs, *((self.unified,) if self.unified else ())) if config.label == label), None)


@dataclass(frozen=True)
class LoadRange:
    """Contiguous client counts `first`..`last` (of those asked) sharing one choice."""

    first: int
    last: int
    config: LoadedConfig


@dataclass(frozen=True)
class LoadedCurve(LatencyCurve):
    """T_B(k) = T(B·k) / B of `base` at `clients` = B: one slot's share of a decode that carries
    every slot's k rows (the identity at B = 1). Its `ks` are the integers up to the base's
    widest, so a copy made from `ks` and `seconds` is exact at every integer width it holds."""

    base: LatencyCurve | None = None
    clients: int = 1

    def many(self, ks: np.ndarray) -> np.ndarray:
        return self.base.many(np.asarray(ks, dtype=float) * self.clients) / self.clients

    def __call__(self, k: float) -> float:
        """T_B(k); at an integer width it holds, the value it holds (the same number, read faster)."""
        if float(k).is_integer() and 1 <= k <= len(self.seconds):
            return self.seconds[int(k) - 1]
        return float(self.many(np.asarray([k], dtype=float))[0])


def loaded_curve(curve: LatencyCurve, clients: int) -> LoadedCurve:
    """`curve` as one of `clients` slots sees it (`LoadedCurve`)."""
    ks = tuple(range(1, max(curve.ks) + 1))
    seconds = tuple(float(value) / clients for value in curve.many(np.asarray(ks, dtype=float) * clients))
    return LoadedCurve(ks, seconds, curve, clients)


# ----------------------------------------------------------------------------------------------
# The lock-step simulation of replayed rounds


@dataclass(frozen=True)
class LoadRun:
    """What `simulate_load` saw: per request its stream, decoded tokens and decode seconds;
    the union of the decode intervals; and that union attributed to streams, each iteration's
    T(width) shared by rows (`counts[(stream, width)]`, fractional) and each slot's loop costs
    to its own stream (`extra`), so a replicate re-prices it with its own T(k) and weights."""

    streams: tuple[int, ...]
    tokens: tuple[int, ...]
    decode_s: tuple[float, ...]
    union_s: float
    counts: dict[tuple[int, int], float]
    extra: dict[int, float]
    parts: tuple[LoadRun, ...] = ()  # each load's own run where the requests were several loads (`simulate_loads`)

    @property
    def loads(self) -> tuple[LoadRun, ...]:
        """Each load's run, one after another (this run where it was one load)."""
        return self.parts or (self,)

    @property
    def aggregate(self) -> float:
        """All requests' decoded tokens over the union of their decode intervals (tokens/s)."""
        return sum(self.tokens) / self.union_s if self.union_s > 0 else 0.0

    @property
    def per_request(self) -> float:
        """Mean over requests of decoded tokens / decode seconds (requests that decoded any)."""
        speeds = [tokens / seconds for tokens, seconds in zip(self.tokens, self.decode_s) if tokens and seconds > 0]
        return float(np.mean(speeds)) if speeds else 0.0

    @property
    def overlap(self) -> float:
        """Requests decoding at once, on average: their decode seconds over the union of their
        decode intervals (B while every slot decodes; less where a slot waits on a prompt or the
        load's tail runs with fewer). A race's timeline gives the measured one
        (`formats.race.LoadRow.overlap`)."""
        return sum(self.decode_s) / self.union_s if self.union_s > 0 else 0.0

    def widest(self) -> int:
        return max((width for _, width in self.counts), default=1)


N_UBATCH = 512  # llama-server's default --ubatch-size: the most rows one forward pass takes
N_BATCH = 2048  # llama-server's default --batch-size: the most rows, decoded and prompt, one iteration takes
UNIFIED_FLAG = "--kv-unified"  # llama-server: one KV stream for every slot, so a decode is never split


def ubatches(rows: Sequence[int], order: Sequence[int] | None = None, n_ubatch: int = N_UBATCH) -> list[list[tuple[int, int]]]:
    """The forward passes llama.cpp splits one decode into when every slot keeps its own KV stream
    (llama-server at `-np N` > 1 without `--kv-unified`): `llama_batch_allocr::split_equal` with
    sequential sequence ids (src/llama-batch.cpp). `rows[c]`: slot c's rows in the decode; `order`:
    the slots in the order their rows sit in the batch (default: by slot). Each pass takes the
    same number of rows from each slot it holds: the slots with rows left whose ids follow one
    another from the first such in batch order, as many rows each as the one with fewest left has
    (at most `n_ubatch` in all). Slots of unequal rows (an n-gram slot that found nothing beside
    one that drafted 15, a confidence stop, a new prompt beside a decode) or a gap in the ids (a
    slot that waits) cost several passes where one sequence of the same width costs one. Returns
    each pass as (slot, rows) pairs."""
    left = list(rows)
    order = list(range(len(rows))) if order is None else list(order)
    passes = []
    while any(left[c] > 0 for c in order):
        members, last = [], None
        for c in order:
            if left[c] > 0 and (last is None or c == last + 1):
                members.append(c)
                last = c
        each = max(1, min(min(left[c] for c in members), n_ubatch // len(members)))
        for c in members:
            left[c] -= each
        passes.append([(c, each) for c in members])
    return passes


@dataclass(frozen=True)
class DraftBatch:
    """A draft model's work in one llama-server iteration, batched across slots (common/speculative.cpp):
    draft step j decodes one row for every slot still drafting, costing the server's one-row pass
    scaled by the draft model's T_d(n)/T_d(1) for n rows; after the target's decode the draft model
    decodes the verified batch again (`reeval` x T_d(Σ decoding rows)) and a new prompt's rows:
    the draft model's own prefill (`prefill_per_token_s` a token, `draft_prefill_per_token_s`:
    the server hands it the batch that carried the prompt, `common_speculative_process`, so it
    stalls every slot decoding in that iteration) and the one-slot calibration's
    `per_prompt_token_s`. At one slot it is `ServerLoop.round_s`'s draft-model terms exactly (an
    iteration that carries a prompt is in no decode interval there)."""

    step: Callable[[int], float]  # the draft model's T_d(k) through the bindings
    per_pass_s: float  # its one-row pass inside the server (`ServerLoop.draft_pass_s`)
    reeval: float  # the factor on the second decode (`ServerLoop.reeval`)
    reeval_step: Callable[[int], float]  # the curve that second decode reads (its last-row T_d)
    per_prompt_token_s: float = 0.0  # the one-slot calibration's draft-model cost per prompt token, in the decode time
    prefill_per_token_s: float = 0.0  # the draft model's own prefill per prompt token (`draft_prefill_per_token_s`)

    def seconds(self, passes: Sequence[int], rows: Sequence[int], split: bool = True) -> float:
        """The iteration's draft-model seconds for each slot's draft `passes` and decoding `rows`
        (0 for a slot that does not decode; a new prompt's rows are priced apart, by
        `_share_draft_batch`). `split`: the slots keep their own KV streams, so each decode is
        split as the target's is (`ubatches`); one slot's is one pass either way."""
        def decode(each: Sequence[int], step: Callable[[int], float]) -> float:
            parts = ubatches(each) if split else [[(0, sum(each))]]
            return sum(step(sum(count for _, count in part)) for part in parts if part)

        drafting = sum(decode([int(count > j) for count in passes], self.step) for j in range(max(passes, default=0)))
        return self.per_pass_s * drafting / self.step(1) + (self.reeval * decode(rows, self.reeval_step) if any(rows) else 0.0)


def simulate_load(requests: Sequence[Sequence[ReplayRound]], stream_of: Sequence[int], prompts: Sequence[int],
                  clients: int, step: Callable[[int], float], loop: ServerLoop = NO_SERVER_LOOP,
                  kind: str = NGRAM, draft: DraftBatch | None = None, split: bool = True,
                  cells: CellCost | None = None, slot_context: int = DEFAULT_SLOT_CONTEXT, n_batch: int = N_BATCH) -> LoadRun:
    """llama-server's lock-step iterations over `requests` (each its rounds: tokens drafted,
    tokens accepted), request i sent by client i mod `clients` after that client's previous one
    ended. An iteration carries each decoding slot's round (its sampled token and draft) and then,
    slot by slot, the new requests' `prompts` rows while the iteration holds fewer than `n_batch`
    rows (server.cpp's `update_slots`): a prompt longer than the room left goes on in the next
    iterations, and a slot decodes from the iteration after its prompt's last row, so the slots
    already decoding wait out the other prompts' chunks. An iteration costs `step`(Σ rows) plus
    each decoding slot's own share (`ServerLoop.slot_share_s` of `kind` at the count of slots
    decoding in it), a finishing
    request's per-request cost and, for a draft model (`draft`; its rounds `ModelRound`s), the
    batched draft passes and second decode (`DraftBatch`), shared by the decoding slots in
    proportion to their rows. A request's decode interval runs from the end of the iteration that
    carried its prompt to the end of its last round (module docstring). `split` False: the slots
    share one KV stream (llama-server `--kv-unified`), so every decode is one pass, which reads
    every slot's cells: `cells` prices that (`kv_cells.CellCost.extra_s`: the cells up to the
    highest one in use, as llama.cpp places and removes each slot's tokens in the stream of
    `clients` · `slot_context` cells (`kv_placement.UnifiedStream`), against the longest of the
    pass's own slots, the cells a split pass would read), shared by the slots in the pass in
    proportion to their rows; None: not priced."""
    queues = [list(range(c, len(requests), clients)) for c in range(clients)]
    slots = [None] * clients  # per slot: [request, next round (-1: prompt pending), decode seconds, KV cells]
    for c in range(clients):
        if queues[c]:
            slots[c] = [queues[c].pop(0), -1, 0.0, 0]
    done: dict[int, tuple[int, float]] = {}
    counts: dict[tuple[int, int], float] = {}
    extra: dict[int, float] = {}
    union = 0.0
    priced: dict[int, float] = {}  # step(width), read once per width
    unified = UnifiedStream(clients * slot_context) if cells is not None and not split and clients > 1 else None
    if n_batch < 1:
        raise PolyplanError(f"llama-server's batch size must be at least 1 row, got {n_batch}")
    while any(slot is not None for slot in slots):
        decoding = [slot is not None and slot[1] >= 0 for slot in slots]
        rows, costs = _iteration_rows(slots, decoding, requests, prompts, loop, kind, n_batch)
        batch_order = [c for c in range(clients) if decoding[c]] + [c for c in range(clients) if not decoding[c]]
        parts = ubatches(rows, batch_order) if clients > 1 and split else [[(c, count) for c, count in enumerate(rows) if count]]
        for width in (sum(count for _, count in part) for part in parts):
            if width not in priced:
                priced[width] = step(width)
        if draft is not None:
            _share_draft_batch(draft, slots, decoding, requests, rows, costs, clients > 1 and split)
        if unified is not None:
            _share_wider_attention(cells, _placed(unified, slots, rows, batch_order), slots, rows, costs)
        seconds = sum(priced[sum(count for _, count in part)] for part in parts) + sum(costs)
        if any(decoding):
            union += seconds
            for part in parts:
                width = sum(count for _, count in part)
                for c, count in part:
                    key = (stream_of[slots[c][0]], width)
                    counts[key] = counts.get(key, 0.0) + count / width
            for slot, cost in zip(slots, costs):
                if slot is not None:
                    stream = stream_of[slot[0]]
                    extra[stream] = extra.get(stream, 0.0) + cost
        else:  # prompts only: in no decode interval but a request that ends at its prompt (its per-request cost)
            ending = [slot[0] for c, slot in enumerate(slots) if slot is not None and not requests[slot[0]]
                      and slot[3] + rows[c] >= prompts[slot[0]]]
            if ending and loop.per_request_s:
                union += loop.per_request_s
                for request in ending:
                    stream = stream_of[request]
                    extra[stream] = extra.get(stream, 0.0) + loop.per_request_s / len(ending)
        for c, slot in enumerate(slots):
            if slot is None:
                continue
            request, at, spent, _ = slot
            rounds = requests[request]
            if at < 0:
                slot[3] += rows[c]
                if slot[3] < prompts[request]:
                    continue  # the prompt's next rows in the next iteration
                slot[1] = 0
                if rounds:
                    continue
                done[request] = (0, loop.per_request_s)
            else:
                slot[2] = spent + seconds
                slot[1] = at + 1
                slot[3] += rounds[at].accepted + 1  # the verified rows stay, the rejected draft's are removed
                if unified is not None:
                    unified.trim(c, slot[3])
                if slot[1] < len(rounds):
                    continue
                done[request] = (sum(item.accepted + 1 for item in rounds), slot[2])
            slots[c] = [queues[c].pop(0), -1, 0.0, 0] if queues[c] else None
    order = range(len(requests))
    return LoadRun(tuple(stream_of), tuple(done[i][0] for i in order), tuple(done[i][1] for i in order), union, counts, extra)


def _iteration_rows(slots: list, decoding: Sequence[bool], requests: Sequence[Sequence[ReplayRound]], prompts: Sequence[int],
                    loop: ServerLoop, kind: str, n_batch: int) -> tuple[list[int], list[float]]:
    """Each slot's rows in one iteration and its own loop costs (`simulate_load`): every decoding
    slot's round first, then each slot's prompt rows left, slot by slot, while the iteration holds
    fewer than `n_batch` rows; a request with no round pays its per-request cost with its prompt's
    last row."""
    rows, costs = [0] * len(slots), [0.0] * len(slots)
    together = sum(decoding)  # slots decoding in this iteration
    for c, slot in enumerate(slots):
        if decoding[c]:
            request, at = slot[0], slot[1]
            drafted = requests[request][at].drafted
            rows[c] = drafted + 1
            ends = at == len(requests[request]) - 1
            costs[c] = loop.slot_share_s(drafted, kind, slots=together) + (loop.per_request_s if ends else 0.0)
    room = n_batch - sum(rows)
    for c, slot in enumerate(slots):
        if slot is None or decoding[c]:
            continue
        left = prompts[slot[0]] - slot[3]
        rows[c] = min(left, max(room, 0))
        room -= rows[c]
        if not requests[slot[0]] and rows[c] == left:
            costs[c] = loop.per_request_s
    return rows, costs


def _placed(stream: UnifiedStream, slots: list, rows: Sequence[int], batch_order: Sequence[int]) -> int:
    """The cells one unified pass reads once its `rows` are placed in `stream`: a slot starting a
    request's prompt first empties the cells its last request left (llama-server's `seq_rm` without
    the prompt cache); where the stream has no room for the batch, idle slots' cells are emptied one
    slot at a time (`try_clear_idle_slots`), and where that is not enough the stream is priced as if
    it had room (the server would fail the batch, which a plan is not for)."""
    for c, slot in enumerate(slots):
        if slot is not None and slot[1] < 0 and slot[3] == 0 and rows[c]:  # a prompt's first rows
            stream.clear(c)
    need = sum(rows)
    idle = [c for c, slot in enumerate(slots) if slot is None and stream.cells.get(c)]
    while stream.free < need and idle:
        stream.clear(idle.pop(0))
    if stream.free < need:
        stream.grow(need - stream.free)
    return stream.place([(c, rows[c]) for c in batch_order if rows[c]])


def _share_wider_attention(cells: CellCost, extent: int, slots: list, rows: Sequence[int], costs: list[float]) -> None:
    """Adds one unified pass's wider attention (`simulate_load`'s `cells`) to `costs`: the pass
    reads the stream up to `extent` (`_placed`) where each slot's own stream would end at its own
    cells; each slot in the pass pays its share in proportion to its rows."""
    width = sum(rows)
    if width <= 0:
        return
    held = [slot[3] + count if slot is not None else 0 for slot, count in zip(slots, rows)]  # cells once the pass is written
    own = max(cell for cell, count in zip(held, rows) if count)
    extra = cells.extra_s(width, extent, own)
    for c, count in enumerate(rows):
        if count:
            costs[c] += extra * count / width


def _share_draft_batch(draft: DraftBatch, slots: list, decoding: Sequence[bool], requests: Sequence[Sequence[ReplayRound]],
                       rows: list[int], costs: list[float], split: bool) -> None:
    """Adds one iteration's batched draft-model seconds (`DraftBatch.seconds`) to `costs`, each
    `decoding` slot's share in proportion to its rows (a prompt's draft prefill to its own slot)."""
    passes = [requests[slot[0]][slot[1]].passes if is_decoding else 0 for slot, is_decoding in zip(slots, decoding)]
    verified = [row if is_decoding else 0 for row, is_decoding in zip(rows, decoding)]
    shared = draft.seconds(passes, verified, split)
    for c, slot in enumerate(slots):
        if decoding[c]:
            costs[c] += shared * verified[c] / sum(verified)
        elif slot is not None:
            costs[c] += (draft.per_prompt_token_s + draft.prefill_per_token_s) * rows[c]


def simulate_loads(requests: Sequence[Sequence[ReplayRound]], stream_of: Sequence[int], prompts: Sequence[int],
                   clients: int, step: Callable[[int], float], loop: ServerLoop = NO_SERVER_LOOP, kind: str = NGRAM,
                   load: int | None = None, draft: DraftBatch | None = None, split: bool = True,
                   cells: CellCost | None = None, slot_context: int = DEFAULT_SLOT_CONTEXT) -> LoadRun:
    """`simulate_load` of each run of `load` consecutive requests on its own, merged: a race sends
    its prompt set as one load (its clients start together, and the load ends before the next
    repeat or configuration), so a workload of 4 prompts at 4 clients is one request a slot, all
    started at once, not 16 streams' prompts landing while the others decode. `load` None: one
    load. At one client the merge is the single simulation's (nothing overlaps)."""
    if load is None or load >= len(requests):
        return simulate_load(requests, stream_of, prompts, clients, step, loop, kind, draft, split, cells, slot_context)
    runs = [simulate_load(requests[i:i + load], stream_of[i:i + load], prompts[i:i + load], clients, step, loop, kind, draft,
                          split, cells, slot_context) for i in range(0, len(requests), load)]
    counts: dict[tuple[int, int], float] = {}
    extra: dict[int, float] = {}
    for run in runs:
        for key, value in run.counts.items():
            counts[key] = counts.get(key, 0.0) + value
        for key, value in run.extra.items():
            extra[key] = extra.get(key, 0.0) + value
    return LoadRun(tuple(s for run in runs for s in run.streams), tuple(t for run in runs for t in run.tokens),
                   tuple(d for run in runs for d in run.decode_s), sum(run.union_s for run in runs), counts, extra, tuple(runs))


def stretched(rounds: Sequence[ReplayRound], tokens: int) -> tuple[ReplayRound, ...]:
    """`rounds` made to decode exactly `tokens`, as a race decodes every request (end-of-sequence
    ignored) where the profile's stream ended sooner: its own rounds again from the start, the last
    one cut to what is left (a round drafting nothing where it has none); longer rounds are kept.
    With several slots decoding side by side the lengths decide who waits for whom; at one request
    they would only weight the streams, and the one-request model is kept there."""
    out, done = list(rounds), sum(item.accepted + 1 for item in rounds)
    cycle = list(rounds) or [ReplayRound(0, 0)]
    index = 0
    while done < tokens:
        item = cycle[index % len(cycle)]
        left = tokens - done
        if item.accepted + 1 > left:
            item = ReplayRound(min(item.drafted, left - 1), left - 1)
        out.append(item)
        done += item.accepted + 1
        index += 1
    return tuple(out)


def target_rounds(requests: Sequence[Sequence[ReplayRound]]) -> list[tuple[ReplayRound, ...]]:
    """The same requests decoded by the target alone: one round drafting nothing per token."""
    return [(ReplayRound(0, 0),) * sum(item.accepted + 1 for item in rounds) for rounds in requests]


def _run_seconds(runs: Sequence[LoadRun], streams: int, replicates: Replicates, weights: np.ndarray) -> np.ndarray:
    """Each replicate's union of decode intervals: replicate r reads `runs[r mod len(runs)]`, its
    streams weighted by `weights[r]` and its widths priced by `replicates.steps[r]`."""
    widths = sorted({width for run in runs for _, width in run.counts})
    column = {width: j for j, width in enumerate(widths)}
    counts = np.zeros((len(runs), streams, len(widths)))
    extra = np.zeros((len(runs), streams))
    for order, run in enumerate(runs):
        for (stream, width), value in run.counts.items():
            counts[order, stream, column[width]] += value
        for stream, value in run.extra.items():
            extra[order, stream] += value
    which = np.arange(weights.shape[0]) % len(runs)
    steps = replicates.steps[:, np.asarray(widths, dtype=int) - 1]
    return np.einsum("rs,rsk,rk->r", weights, counts[which], steps) + np.einsum("rs,rs->r", weights, extra[which])


def _reweighted_speedups(runs: Sequence[LoadRun], bases: Sequence[LoadRun], streams: int, replicates: Replicates,
                         weights: np.ndarray) -> np.ndarray:
    """Each replicate's speedup with its streams reweighted (`_run_seconds`), load by load, the
    mean over the loads it draws a prompt from: where a load sends fewer prompts than the profile
    has streams, a replicate can draw none of one load's, and that load is no part of it."""
    ratios = []
    for j in range(len(runs[0].loads)):
        base = _run_seconds([run.loads[j] for run in bases], streams, replicates, weights)
        own = _run_seconds([run.loads[j] for run in runs], streams, replicates, weights)
        ratios.append(np.divide(base, own, out=np.full_like(base, np.nan), where=own > 0))
    return np.nanmean(ratios, axis=0)


def replicate_session(session: SessionReplay, counts: np.ndarray, streams: int) -> SessionReplay:
    """A replicate's prompt set served as `session` serves its prompts: stream s `counts[s]`
    times, in stream order, once for each of the session's repeats (its requests in runs of
    `streams`), each request taking the rounds `session` replayed for that stream in that repeat."""
    rounds_of = {(index // streams, stream): rounds for index, (rounds, stream) in enumerate(zip(session.requests, session.stream_of))}
    picks = np.repeat(np.arange(streams), np.asarray(counts, dtype=int))
    repeats = max(1, -(-len(session.stream_of) // streams))
    stream_of = tuple(int(stream) for _ in range(repeats) for stream in picks)
    requests = tuple(rounds_of.get((number // max(len(picks), 1), stream), rounds_of[(0, stream)])
                     for number, stream in enumerate(stream_of))
    return SessionReplay(requests, stream_of)


def load_speedup(run: LoadRun, base: LoadRun, union: Callable[[LoadRun], float] = lambda load: load.union_s) -> float:
    """The target alone's decode time over the configuration's, load by load, and the mean over
    the loads: a race's repeats are loads of their own, each reported as its own ratio and the
    mean taken (a rule that remembers one repeat in the next speeds only the later loads).
    `union`: a load's seconds (default: as simulated; `_priced_union` re-prices them)."""
    return float(np.mean([union(b) / union(r) for r, b in zip(run.loads, base.loads)]))


def _priced_union(run: LoadRun, steps: np.ndarray) -> float:
    """The union of a simulated load's decode intervals with T(k) = `steps[k - 1]`: each width's
    passes (`LoadRun.counts` summed over streams) at that T, plus the loop's costs."""
    passes: dict[int, float] = {}
    for (_, width), value in run.counts.items():
        passes[width] = passes.get(width, 0.0) + value
    return sum(value * steps[width - 1] for width, value in passes.items()) + sum(run.extra.values())


# ----------------------------------------------------------------------------------------------
# Ranking at each load


@dataclass(frozen=True)
class _Replayed:
    """One replayed configuration: its label, flags, sessions (one per request order, replayed
    as one slot serves them all) and its rule (`serve_slots` replays it at more slots)."""

    label: str
    flags: tuple[str, ...]
    sessions: tuple[SessionReplay, ...]
    make_rule: Callable[[], DraftRule]


@dataclass(frozen=True)
class _Drafted(RacedDraft):
    """One configuration priced by the exact model (a draft model's, or an n-gram drafter's by α;
    under load a draft model's is simulated where its rounds replay, else on loaded curves): a
    `RacedDraft` with its method and whether it has an interval."""

    method: str = "draft_model"
    interval: bool = True


def _replayed_configs(options: Sequence[EngineOption], request: ServerRanking, streams: Sequence[TargetStream],
                      orders: Sequence[Sequence[int]]) -> tuple[list[_Replayed], list]:
    """What `rank_server_configs` replays, as sessions in each of the request `orders`; and the
    n-gram drafters priced by α where nothing is replayed, (label, flags, option)."""
    workload = request.workload

    def sessions(make_rule) -> tuple[SessionReplay, ...]:
        return tuple(departed(replay_session(streams, make_rule, new_tokens=workload.new_tokens, repeats=workload.repeats,
                                             order=order), streams, request.near_ties) for order in orders)

    replayed, by_alpha, seen = [], [], set()
    if streams:
        for kind, (make_rule, flags) in LLAMA_CPP_RULES.items():
            replayed.append(_Replayed(f"{kind} (defaults)", tuple(flags), sessions(make_rule), make_rule))
    for option in (o for o in options if o.reason is None and o.method == "ngram"):
        size_n, k = option.ngram_sizes[1], option.block_size
        flags = tuple(llama_cpp_spec_flags("ngram", k, "", option.ngram_sizes))
        if flags in seen:
            continue
        seen.add(flags)
        label = f"ngram-simple size-n={size_n} K={k}"
        if streams:
            make = functools.partial(NGramSimpleRule, size_n, k)
            replayed.append(_Replayed(label, flags, sessions(make), make))
        elif option.prediction is not None:
            by_alpha.append((label, flags, option))
    for flags in request.replay_also if streams else ():
        rule = rule_for_flags(flags)
        if rule is not None and tuple(flags) not in seen and all(tuple(flags) != item.flags for item in replayed):
            seen.add(tuple(flags))
            replayed.append(_Replayed(rule[0], tuple(flags), sessions(rule[1]), rule[1]))
    return replayed, by_alpha


def _drafted_configs(options: Sequence[EngineOption], request: ServerRanking) -> tuple[list[_Drafted], list[str]]:
    """Every draft-model configuration `rank_server_configs` ranks (the options' fixed K, a
    race's draft-simple flags, the plan's confidence stop), with its K fixed as there, and notes."""
    pricing = request.pricing
    how = "exact model with alpha and llama-server's draft loop" if pricing.ratio is not None else "exact model with alpha"
    rows = []
    for option in options:
        if option.reason is None and option.method == "draft_model":
            rows.append(_Drafted(f"draft-simple {option.drafter} K={option.block_size}",
                                 tuple(llama_cpp_spec_flags("draft_model", option.block_size, option.source)), how, pricing,
                                 option.drafter, option.block_size, option.alpha))
    drafts, notes = raced_draft_configs(options, request, {row.flags for row in rows})
    rows += [_Drafted(*(getattr(draft, field.name) for field in dataclasses.fields(draft))) for draft in drafts]
    row, lines = _policy_config(options, request)
    rows += row
    notes += [line for line in lines if line not in notes]
    return rows, notes


def _policy_config(options: Sequence[EngineOption], request: ServerRanking) -> tuple[list[_Drafted], list[str]]:
    """The plan's confidence stop as a draft-simple configuration at the K `rank_server_configs`
    chooses for it (one request in flight, `planner.llama_cpp.export.policy_stop`), and its notes."""
    found, notes = policy_stop(options, request)
    if found is None:
        return [], notes
    row = _Drafted(found.label(), tuple(found.flags()), "the plan's confidence stop replayed on the drafter's agreement sequences",
                   dataclasses.replace(request.pricing, profile=found.view), found.drafter, found.k, found.rounds, found.stop)
    return [row], notes


def workload_prompts(streams: Sequence[TargetStream], request: ServerRanking) -> list[tuple[int, int]]:
    """(prompt tokens, tokens decoded after the prefill's first) of every request the workload
    sends, in the order sent (the streams' order, the list `repeats` times); requests that decode
    nothing after their first token are left out, as the draft model's pricing leaves them."""
    requests = []
    for stream in streams:
        generated = len(stream.ids) - stream.prompt_tokens
        if request.workload.new_tokens is not None:
            generated = min(generated, request.workload.new_tokens)
        if generated > 1:
            requests.append((stream.prompt_tokens, generated - 1))
    return requests * request.workload.repeats


def prompt_stalls(curve: LatencyCurve, clients: int, rows: int, prompts: Sequence[int], prefill_per_token_s: float = 0.0) -> float:
    """Seconds new requests' prompts add to the other slots' decoding when every slot decodes
    `rows` rows an iteration, summed over `prompts` (each prompt's tokens): the iteration
    carrying a prompt of P tokens costs T((B − 1)·rows + P) plus a draft model's prefill of it
    (`prefill_per_token_s`·P), in which B − 1 slots make the progress of (B − 1)/B of a full
    iteration T(B·rows). None of it is in a decode interval when no other slot decodes (B = 1)."""
    if clients == 1 or not len(prompts):
        return 0.0
    full = (clients - 1) / clients * curve(clients * rows)
    tokens = np.asarray(prompts, dtype=float)
    return float(np.sum(curve.many((clients - 1) * rows + tokens)) + prefill_per_token_s * np.sum(tokens) - len(prompts) * full)


def draft_prefill_per_token_s(entry: ModelProfile) -> float:
    """A draft model's prefill seconds per prompt token from its entry's prefill timings (their
    seconds over their tokens; 0 where it has none)."""
    tokens = sum(point.context_length for point in entry.prefill)
    return sum(point.median_s for point in entry.prefill) / tokens if tokens else 0.0


def _loaded_speedup(prediction: ChainPrediction, loop: ServerLoop, requests: list[tuple[int, int]], stalls: tuple[float, float]) -> float:
    """A draft model's aggregate speedup on loaded curves: every request's per-request cost, its
    draft model's prefill and its prompt's stall, plus the loaded cost of its tokens, against the
    target alone's; `stalls`: (the configuration's, the target alone's) summed over the requests."""
    if not requests:
        return prediction.speedup
    fixed = loop.per_request_s * len(requests)
    tokens = sum(decoded for _, decoded in requests)
    prefill = loop.per_draft_prompt_token_s * sum(prompt for prompt, _ in requests)
    baseline = prediction.speedup * prediction.cost_per_token
    return (fixed + stalls[1] + baseline * tokens) / (fixed + stalls[0] + prefill + prediction.cost_per_token * tokens)


class _Ranker:
    """State shared by the counts asked: the replays, the draft rows' bootstrap replicates."""

    def __init__(self, options: Sequence[EngineOption], request: ServerRanking, with_unified: bool = True):
        self.options, self.request = options, request
        self.with_unified = with_unified  # price `--kv-unified` beside the default server (`unified`)
        pricing = request.pricing
        self.loop = request.loop
        greedy = SamplingMode.parse(request.sampling).greedy
        self.streams = target_streams(pricing.profile) if greedy else ()
        workload = request.workload
        self.orders = request_orders(len(self.streams), 1 if workload.in_order else ORDERS) if self.streams else []
        self.replayed, self.by_alpha = _replayed_configs(options, request, self.streams, self.orders)
        self.drafted, notes = _drafted_configs(options, request)
        self.notes = [*request.price_notes, *notes]
        self.requests = workload_prompts(self.streams, request)
        self.load = request.workload.prompts or len(self.streams) or None  # requests a load sends (`simulate_loads`)
        self.widest = max(pricing.target_curve.ks)
        self._targets: dict[tuple, LoadRun] = {}
        self._pairs: dict[tuple, object] = {}
        self._slot_sessions: dict[tuple, tuple[SessionReplay, ...]] = {}
        self._draft_sessions: dict[str, tuple[SessionReplay, ...] | None] = {}
        self.replicates: Replicates | None = None

    # -- replayed rows

    def prompts(self, session: SessionReplay) -> list[int]:
        return [self.streams[stream].prompt_tokens for stream in session.stream_of]

    def run(self, session: SessionReplay, clients: int, target: bool = False, draft: DraftBatch | None = None,
            split: bool = True, load: int | None = None) -> LoadRun:
        """The simulation of one session at `clients` (the target alone's kept per order; `draft`:
        a draft model's session, its batched passes priced so; `split` False: `--kv-unified`;
        `load`: the requests a load sends, None: the workload's)."""
        curve = self.request.pricing.target_curve
        requests = session.requests
        workload = self.request.workload
        load = self.load if load is None else load
        if clients > 1 and workload.new_tokens and not workload.to_eos:  # a race that decodes past end of sequence
            requests = tuple(stretched(rounds, workload.new_tokens - 1) for rounds in requests)
        if not target:
            return simulate_loads(requests, session.stream_of, self.prompts(session), clients, curve, self.loop,
                                  NGRAM if draft is None else DRAFT_MODEL, load=load, draft=draft, split=split,
                                  cells=None if split else self.request.kv_cells, slot_context=workload.slot_context)
        key = (session.stream_of, tuple(sum(item.accepted + 1 for item in rounds) for rounds in requests), clients, load)
        if key not in self._targets:
            self._targets[key] = simulate_loads(target_rounds(requests), session.stream_of, self.prompts(session),
                                                clients, curve, self.loop, TARGET_ALONE, load=load)
        return self._targets[key]

    def replicates_for(self, width: int) -> Replicates:
        """The replayed rows' replicates, T(k) to `width` (the same draws as the export's)."""
        if self.replicates is None or self.replicates.steps.shape[1] < width:
            pricing = self.request.pricing
            width = max([width, 48, 64, *(o.block_size for o in self.options if o.block_size)]) + 1
            self.replicates = ranking_replicates(pricing.profile, self.request.target, len(self.streams), width,
                                                 pricing.context_length, self.request.workload.prompts)
        return self.replicates

    def sessions(self, item: _Replayed, clients: int) -> tuple[SessionReplay, ...]:
        """`item`'s sessions as `clients` slots serve them (`ngram_rules.serve_slots`: each slot its
        own rule state, ngram-mod's table shared, the slots' rounds interleaved as they decode)."""
        if clients == 1:
            return item.sessions
        key = (item.label, clients)
        if key not in self._slot_sessions:
            self._slot_sessions[key] = tuple(departed(serve_slots(self.streams, item.make_rule, session.stream_of, clients,
                                                                  new_tokens=self.request.workload.new_tokens, load=self.load),
                                                      self.streams, self.request.near_ties)
                                             for session in item.sessions)
        return self._slot_sessions[key]

    def replayed_row(self, item: _Replayed, clients: int) -> tuple[RankedConfig, LoadRun]:
        return self.simulated_row(item.label, item.flags, self.sessions(item, clients), clients, "replayed")

    def simulated_row(self, label: str, flags: tuple[str, ...], sessions: Sequence[SessionReplay], clients: int, note: str,
                      draft: DraftBatch | None = None, split: bool = True) -> tuple[RankedConfig, LoadRun]:
        """A configuration simulated over `sessions` (one per request order) at `clients`: the
        median order's speedup over the target alone (served as llama-server serves it by default),
        the interval over the replicates; `split` False: the configuration with `--kv-unified`."""
        runs = [self.run(session, clients, draft=draft, split=split) for session in sessions]
        bases = [self.run(session, clients, target=True) for session in sessions]
        speedups = [load_speedup(run, base) for run, base in zip(runs, bases)]
        median = int(np.argsort(speedups, kind="stable")[len(runs) // 2])
        point = speedups[median]
        replicates = self.replicates_for(max(max(run.widest(), base.widest()) for run, base in zip(runs, bases)))
        intervals = []
        for weights in (replicates.weights, replicates.workload):
            if weights is None:
                intervals.append(None)
                continue
            if clients > 1 and weights is replicates.workload and point > 1.0:
                values = self._simulated_replicates(sessions[median], clients, weights, draft, split)
            else:  # the streams' shares reweighted, load by load: exact at one request, wider than simulated sets under load
                values = _reweighted_speedups(runs, bases, len(self.streams), replicates, weights)
            intervals.append(percentile_interval(point, values, point, replicates.stretch, LEVEL))
        note += self._extrapolated(runs[median])
        return RankedConfig(label, flags, point, intervals[0], note, workload_interval=intervals[1]), runs[median]

    def _simulated_replicates(self, session: SessionReplay, clients: int, weights: np.ndarray, draft: DraftBatch | None,
                              split: bool) -> np.ndarray:
        """Each replicate's speedup with `clients` slots, its prompt set (`weights[r]`: how often
        each stream is in it) simulated as a load of its own (`replicate_session`) beside the
        target alone on the same set, each priced with the replicate's T(k), the mean over its
        loads. Under load a prompt set's speedup is not a weighted sum of its streams': a stream
        whose drafts fail widens the passes every other slot decodes in, so the loads are
        simulated, not reweighted. Used for the workload interval (what the choice reads) of a
        row whose point pays (only such a row can be chosen): a simulation per replicate costs
        what reweighting one does not."""
        pairs = []
        for row in weights:
            replicate = replicate_session(session, row, len(self.streams))
            size = int(row.sum())
            pairs.append((self.run(replicate, clients, draft=draft, split=split, load=size),
                          self.run(replicate, clients, target=True, load=size)))
        steps = self.replicates_for(max(max(run.widest(), base.widest()) for run, base in pairs)).steps
        return np.array([load_speedup(run, base, functools.partial(_priced_union, steps=steps[r]))
                         for r, (run, base) in enumerate(pairs)])

    def _extrapolated(self, run: LoadRun) -> str:
        """The share of the run's predicted time at widths beyond the widest T(k) measured."""
        curve = self.request.pricing.target_curve
        total = run.union_s
        beyond = sum(value * curve(width) for (_, width), value in run.counts.items() if width > self.widest)
        if total <= 0 or beyond <= 0:
            return ""
        return f"; {100 * beyond / total:.0f}% of its predicted time at widths beyond the widest T(k) measured ({self.widest})"

    # -- draft-model rows

    def stalls(self, clients: int, rows: int, curve: LatencyCurve | None = None, prefill_per_token_s: float = 0.0) -> float:
        """The prompts' stalls (`prompt_stalls`) of the workload's requests but the first
        `clients` of each load (`simulate_loads`), which start together before any decode
        interval; `curve`: the target's T(k) (None: the pricing's); `prefill_per_token_s`: a
        draft model's prefill of each prompt in the same iteration."""
        curve = self.request.pricing.target_curve if curve is None else curve
        load = self.load or 1  # (None only without streams, when there are no requests either)
        return prompt_stalls(curve, clients, rows, [prompt for i, (prompt, _) in enumerate(self.requests) if i % load >= clients],
                             prefill_per_token_s)

    def draft_sessions(self, item: _Drafted) -> tuple[SessionReplay, ...] | None:
        """A draft model's sessions (`planner.llama_cpp.draft_replay`) in the replays' request
        orders; None where it is not replayed (no greedy streams, an n-gram drafter priced by α, a
        profile without the pair's sequences: it keeps the loaded curves)."""
        if item.label not in self._draft_sessions:
            sessions = None
            if self.streams and item.method == "draft_model":
                workload = self.request.workload
                try:
                    sessions = draft_sessions(item.pricing.profile, self.request.target, item.drafter, item.k, item.policy.p_min,
                                              self.streams, workload.new_tokens, workload.repeats, self.orders)
                except PolyplanError as error:
                    note = f"{item.label}: priced on loaded curves under load, not simulated ({error})"
                    self.notes += [] if note in self.notes else [note]
            self._draft_sessions[item.label] = sessions
        return self._draft_sessions[item.label]

    def draft_batch(self, item: _Drafted) -> DraftBatch:
        """How `item`'s draft model's batched work in an iteration costs (`DraftBatch`), as the
        one-request price reads it (`planner.llama_cpp.export.DraftPricing.predict`)."""
        pricing, loop = item.pricing, self.loop
        curve = curve_from_profile(pricing.profile.model(item.drafter), pricing.context_length)
        per_pass = curve(1) * (1.0 if pricing.ratio is None else pricing.ratio)
        return DraftBatch(curve, per_pass, loop.reeval, pricing.reevals.get(item.drafter, curve), loop.per_draft_prompt_token_s,
                          self.prefill_per_token_s(item))

    @staticmethod
    def prefill_per_token_s(item: _Drafted) -> float:
        """`item`'s draft model's prefill per prompt token (`draft_prefill_per_token_s`); 0 for an
        n-gram drafter priced by α, which reads no prompt through a model."""
        if item.method != "draft_model":
            return 0.0
        return draft_prefill_per_token_s(item.pricing.profile.model(item.drafter))

    def drafted_row(self, item: _Drafted, clients: int) -> tuple[RankedConfig, LoadRun | None]:
        """`item` at `clients`: at one request the exact model's price (the export's, exactly);
        with several, simulated iteration by iteration on its replayed rounds where it has them,
        else on loaded curves."""
        sessions = self.draft_sessions(item) if clients > 1 else None
        if sessions is None:
            return self.loaded_row(item, clients), None
        return self.simulated_row(item.label, item.flags, sessions, clients,
                                  "its rounds replayed on the agreement sequences, the server's batched draft simulated",
                                  self.draft_batch(item))

    def loaded_row(self, item: _Drafted, clients: int) -> RankedConfig:
        """`item` priced by the exact model on loaded curves (module docstring)."""
        pricing = item.pricing
        loaded = dataclasses.replace(pricing, target_curve=loaded_curve(pricing.target_curve, clients),
                                     reevals={name: loaded_curve(curve, clients) for name, curve in pricing.reevals.items()},
                                     loop=None if pricing.loop is None else pricing.loop.at(clients))
        drafter_curve = curve_from_profile(pricing.profile.model(item.drafter), pricing.context_length)
        curves = (loaded.target_curve, loaded_curve(drafter_curve, clients))
        stalls = (self.stalls(clients, item.k + 1, prefill_per_token_s=self.prefill_per_token_s(item)), self.stalls(clients, 1))
        point = _loaded_speedup(loaded.predict(item.drafter, item.acceptance, item.k, item.method, curves=curves),
                                self.loop, self.requests, stalls)
        intervals = [self._draft_interval(item, loaded, clients, point, stalls, new_set) if item.interval else None
                     for new_set in (True, False)]
        how = item.how + ("" if not self.requests else self.server_words(clients))
        how += "" if not item.interval or intervals[0] is not None else " (no interval)"
        return RankedConfig(item.label, item.flags, point, intervals[0], how, workload_interval=intervals[1])

    def server_words(self, clients: int) -> str:
        """What the draft model's price adds to the exact model's, in words."""
        parts = []
        if self.loop.per_draft_prompt_token_s or self.loop.per_request_s:
            parts.append("the server's per-request cost and the draft model's prefill of each prompt")
        if clients > 1:
            parts.append(f"the other {clients - 1} slots' prompts as stalls")
        return "" if not parts else ", " + " and ".join(parts) + " over the replays' requests"

    def _draft_interval(self, item: _Drafted, loaded: DraftPricing, clients: int, point: float, stalls,
                        new_set: bool) -> tuple[float, float] | None:
        request = self.request
        key = (id(item.pricing.profile), item.drafter, item.k, item.policy, new_set)
        if key not in self._pairs:
            try:
                self._pairs[key] = pair_replicates(item.pricing.profile, request.target, item.drafter, item.k,
                                                   ChainSettings(request.sampling, item.pricing.context_length),
                                                   policy=item.policy, resamples=RESAMPLES, new_set=new_set,
                                                   set_size=request.workload.prompts)
            except PolyplanError:
                self._pairs[key] = None
        replicates = self._pairs[key]
        if replicates is None:
            return None
        drafter_curve = curve_from_profile(item.pricing.profile.model(item.drafter), item.pricing.context_length)
        curves = (loaded.target_curve, loaded_curve(drafter_curve, clients))
        prefill = self.prefill_per_token_s(item)
        measured = _loaded_speedup(loaded.predict(item.drafter, replicates.measured, item.k, curves=curves),
                                   self.loop, self.requests, stalls)
        speedups = np.asarray([
            _loaded_speedup(loaded.predict(item.drafter, acceptance, item.k,
                                           curves=(loaded_curve(target_curve, clients), loaded_curve(drafter_curve, clients))),
                            self.loop, self.requests, (self.stalls(clients, item.k + 1, target_curve, prefill),
                                                       self.stalls(clients, 1, target_curve)))
            for acceptance, target_curve, drafter_curve in zip(replicates.acceptance, replicates.target, replicates.drafter)])
        return percentile_interval(point, speedups, measured, replicates.stretch)

    def alpha_row(self, label: str, flags, option, clients: int) -> RankedConfig:
        """An n-gram drafter priced by α (nothing replayed), on loaded curves."""
        item = _Drafted(label, flags, "alpha model (no interval)", self.request.pricing, option.drafter,
                        option.block_size, option.alpha, method="ngram", interval=False)
        return self.loaded_row(item, clients)

    # -- one count

    def target_speed(self, clients: int) -> tuple[float, float, float | None]:
        """The target alone's (aggregate, per-request) decode tokens/s at `clients`, and its
        overlap: simulated over the workload in its own order where there are streams, else on
        the loaded curve (overlap None: not simulated)."""
        if self.replayed:
            run = self.run(self.replayed[0].sessions[0], clients, target=True)  # its tokens: every configuration's
            return run.aggregate, run.per_request, run.overlap
        curve = self.request.pricing.target_curve
        aggregate = 1.0 / (curve(clients) / clients + self.loop.per_round_at(clients))
        return aggregate, aggregate / clients, None

    def unified(self, clients: int) -> LoadedConfig | None:
        """The simulated configuration with one KV stream for every slot (`--kv-unified`: each
        decode one pass, `ubatches` not applied) that pays most surely (`choose_config`'s rule),
        else the fastest, against the target alone as the server runs it by default; None at one
        request (nothing to split) or where nothing is simulated."""
        if clients < 2:
            return None
        items = [(item.label, item.flags, self.sessions(item, clients), None) for item in self.replayed]
        items += [(item.label, item.flags, sessions, self.draft_batch(item))
                  for item in self.drafted if (sessions := self.draft_sessions(item)) is not None]
        how = ("simulated with one KV stream, its passes reading every slot's cells" if self.request.kv_cells is not None
               else "simulated with one KV stream, the other slots' cells its passes read not priced")
        simulated = [self.simulated_row(f"{label} --kv-unified", (*flags, UNIFIED_FLAG), sessions, clients, how, draft,
                                        split=False) for label, flags, sessions, draft in items]
        if not simulated:
            return None
        chosen = choose_config([row for row, _ in simulated])  # "off" where none pays: then the fastest
        row, run = max(simulated, key=lambda item: (item[0] is chosen, item[0].speedup))
        return LoadedConfig(row.label, row.flags, clients, row.speedup, row.interval, row.workload_interval,
                            run.aggregate, run.per_request, row.note, run.overlap)

    def rank(self, clients: int) -> LoadRanking:
        target_aggregate, target_request, target_overlap = self.target_speed(clients)
        rows, speeds = [], {OFF: (target_aggregate, target_request, target_overlap)}
        for item in self.replayed:
            row, run = self.replayed_row(item, clients)
            rows.append(row)
            speeds[row.label] = (run.aggregate, run.per_request, run.overlap)
        for label, flags, option in self.by_alpha:
            rows.append(self.alpha_row(label, flags, option, clients))
        for item in self.drafted:
            row, run = self.drafted_row(item, clients)
            rows.append(row)
            if run is not None:
                speeds[row.label] = (run.aggregate, run.per_request, run.overlap)
        order = ranked(rows)
        chosen = choose_config(order)
        configs = []
        for row in order:
            aggregate, per_request, overlap = speeds.get(row.label, (row.speedup * target_aggregate,
                                                                    row.speedup * target_request, None))
            configs.append(LoadedConfig(row.label, row.flags, clients, row.speedup, row.interval, row.workload_interval,
                                        aggregate, per_request, row.note, overlap))
        limit, _ = load_limit(self.request.pricing.target_curve, clients, self.request.k_max, self.loop)
        chosen_row = next(config for config in configs if config.label == chosen.label)
        unified = self.unified(clients) if self.with_unified else None
        if unified is not None and unified.low > 1.0 and surest([chosen_row, unified]) is unified:  # "off" never outranks a row that pays
            chosen_row = unified  # `choose_config`'s rule over the ranked rows and the unified one
        return LoadRanking(clients, tuple(configs), chosen_row, limit, target_aggregate, tuple(self.notes), unified,
                           self.request.kv_cells is not None)


def rank_under_load(options: Sequence[EngineOption], request: ServerRanking, clients: Sequence[int],
                    unified: bool = True) -> tuple[LoadRanking, ...]:
    """Every configuration `planner.llama_cpp.export.rank_server_configs` ranks, and off, at each
    count of `clients` requests in flight, fastest first, with the choice at each (module
    docstring). The replays are made once per set of answers (`ServerRanking.answers`: the server's
    own at each count, where measured) and simulated at every count that reads it. `unified`: also the
    fastest with llama-server's `--kv-unified` at each count (`LoadRanking.unified`)."""
    rankings = {}
    for streams, counts in _by_answers(request, sorted(set(clients))):
        at = request if streams is None else dataclasses.replace(
            request, pricing=dataclasses.replace(request.pricing, profile=request.pricing.profile.with_streams(streams)))
        ranker = _Ranker(options, at, unified)
        rankings.update({count: ranker.rank(count) for count in counts})
    return tuple(rankings[count] for count in sorted(set(clients)))


def _by_answers(request: ServerRanking, counts: Sequence[int]) -> list[tuple[tuple | None, list[int]]]:
    """`counts` grouped by the answers each is replayed over (`ServerRanking.answers`, the server's
    own at that count of slots; None: the profile's streams), in order of first count."""
    answers = dict(request.answers)
    groups: dict[tuple | None, list[int]] = {}
    for count in counts:
        groups.setdefault(answers.get(count), []).append(count)
    return list(groups.items())


# ----------------------------------------------------------------------------------------------
# The physical limit, the widths a plan needs, and the plan across counts


def load_limit(step: Callable[[int], float], clients: int, k_max: int, loop: ServerLoop = NO_SERVER_LOOP) -> tuple[float, int]:
    """(speedup, K) of a free drafter that is always right at `clients` slots: each slot gains
    K + 1 tokens an iteration of width B·(K + 1) and pays the server's per-slot costs of an
    n-gram round that drafted K, against the target alone's iteration of width B; the best K in
    1..k_max, (1.0, 0) where none beats the target alone."""
    baseline = step(clients) / clients + loop.per_round_at(clients)
    best = (1.0, 0)
    for k in range(1, k_max + 1):
        speedup = (k + 1) * baseline / (step(clients * (k + 1)) / clients + loop.round_s(k, NGRAM, slots=clients))
        if speedup > best[0]:
            best = (speedup, k)
    return best


def needed_width(request: ServerRanking, clients: Sequence[int] | int, k_max: int) -> int:
    """The widest target decode the decision reads at `clients`: B·(K + 1) of a fixed-K row (K
    up to `k_max`, or a race's larger `--spec-draft-n-max`) at the largest B; the target alone
    reads B."""
    most = max(clients) if isinstance(clients, Sequence) else int(clients)
    drafts = [draft.n_max for draft in (draft_simple_flags(flags) for flags in request.replay_also) if draft is not None]
    return most * (max([k_max, *drafts]) + 1)


def ranked_block_size(options: Sequence[EngineOption], request: ServerRanking) -> int:
    """The largest K a fixed-K row of the ranking drafts (every row keeps the K chosen at one
    request): the options' block sizes and the plan's confidence stop's K (`needed_width`'s
    `k_max`, so that a plan searched to the widest width timed does not ask for B times it)."""
    sizes = [option.block_size for option in options if option.reason is None and option.block_size]
    rows, _ = _policy_config(options, request)
    return max([1, *sizes, *(row.k for row in rows)])


def measured_width(request: ServerRanking) -> int:
    """The widest target decode whose T(k) the pricing holds."""
    return max(request.pricing.target_curve.ks)


def check_widths(request: ServerRanking, clients: Sequence[int], k_max: int, command: str,
                 option: str = "--concurrency") -> None:
    """Nothing where the target's T(k) reaches every width the decision at `clients` reads.

    Raises:
        PolyplanError: one line naming `option`, the widths measured, the widths needed and
            `command`, which measures them.
    """
    needed, measured = needed_width(request, clients, k_max), measured_width(request)
    if needed > measured:
        counts = ",".join(str(count) for count in sorted(set(clients)))
        raise PolyplanError(f"{option} {counts}: the target's T(k) is measured at widths up to {measured}, and "
                            f"{max(clients)} requests in flight at K up to {needed // max(clients) - 1} need widths up to "
                            f"{needed}; measure them with: {command}")


def _tied(row: LoadedConfig | None, other: LoadedConfig) -> bool:
    """Whether `row` and `other` are tied: either's interval holds the other's point."""
    if row is None:
        return False
    if row.label == other.label:
        return True
    return any(bounds is not None and bounds[0] <= point <= bounds[1]
               for bounds, point in ((row.bounds, other.speedup), (other.bounds, row.speedup)))


def same_server(label: str, chosen: LoadedConfig) -> bool:
    """Whether a server run as `label` is the one `chosen` is: the same configuration, or at one
    request the same with `--kv-unified` (one slot has one KV stream whatever the flag says)."""
    return label == chosen.label or (chosen.clients == 1 and label == f"{chosen.label} {UNIFIED_FLAG}")


def load_ranges(rankings: Sequence[LoadRanking]) -> tuple[LoadRange, ...]:
    """Contiguous client counts sharing one choice, in increasing count: a count whose choice is
    tied within its interval with the current range's (that configuration still paying there, or
    off) extends the range; so does a choice that is the current range's with `--kv-unified` where
    the range holds one request only (`same_server`), the range then served with the flag."""
    ordered = sorted(rankings, key=lambda item: item.clients)
    ranges: list[LoadRange] = []
    for ranking in ordered:
        if ranges:
            current = ranges[-1]
            if current.last == 1 and same_server(ranking.chosen.label, current.config):
                ranges[-1] = LoadRange(current.first, ranking.clients, ranking.chosen)
                continue
            row = ranking.config(current.config.label)
            pays = row is not None and (row.label == OFF or row.low > 1.0)
            if pays and _tied(row, ranking.chosen):
                ranges[-1] = dataclasses.replace(current, last=ranking.clients)
                continue
        ranges.append(LoadRange(ranking.clients, ranking.clients, ranking.chosen))
    return tuple(ranges)


def off_from(rankings: Sequence[LoadRanking]) -> int | None:
    """The least client count from which the choice is off at every larger count asked (None:
    the largest count's choice drafts)."""
    first = None
    for ranking in sorted(rankings, key=lambda item: item.clients, reverse=True):
        if ranking.chosen.label != OFF:
            break
        first = ranking.clients
    return first
