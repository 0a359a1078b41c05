"""llama-server's own decoding loop: what a request costs besides the target's forward passes.

A request's decode time is per_request + Σ_rounds [T(L + 1) + per_round + per_row · L + spec(L)]
plus a draft model's prefill, spec(L) an n-gram type's round cost or a draft model's round, passes
and second decode of the verified batch (`common_speculative_process` after every target decode),
which on llama.cpp's CPU kernels is most of a short round's cost. `ServerLoop` holds the costs;
`fit_server_loop` fits them from calibration requests (`ServerRequest`). The model in full and the
measurements behind each term: docs/engines.md, "How a llama.cpp export is priced". With N slots
decoding together, one iteration is one target decode of every slot's rows and each slot's own
round; the per-round cost at N slots is calibrated on its own (`slot_round_cost`,
`ServerLoop.per_round_at`), the other costs keep their one-slot values. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.overhead import fit_loop_costs

TARGET_ALONE, NGRAM, DRAFT_MODEL = "target", "ngram", "draft-model"
KINDS = (TARGET_ALONE, NGRAM, DRAFT_MODEL)
COSTS = 8  # the columns of `ServerRequest.counts`, the fields of `ServerLoop` in that order


@dataclass(frozen=True)
class ServerLoop:
    """llama-server's seconds outside the bindings' T(k) (module docstring); None: not calibrated."""

    per_request_s: float = 0.0  # once per request's decode
    per_round_s: float = 0.0  # every target pass (sampling the first row, the slot's bookkeeping)
    per_row_s: float = 0.0  # every drafted row the target verifies (its sampling)
    per_ngram_round_s: float = 0.0  # an n-gram type's round (its draft call and accept)
    per_draft_round_s: float = 0.0  # a draft model's round (its draft call, set-up, bookkeeping)
    per_draft_pass_s: float | None = None  # a draft model's pass: a drafted token, or a stop's (None: T_d(1))
    per_draft_prompt_token_s: float = 0.0  # a draft model's prefill per prompt token, inside the decode time
    draft_reeval: float | None = None  # the second decode of a verified batch over its last-row T_d(L + 1)
    slot_rounds: tuple[tuple[int, float], ...] = ()  # (N >= 2, a slot's per-round cost with N slots decoding together)

    def per_round_at(self, slots: int) -> float:
        """A slot's per-round cost when `slots` slots decode in one iteration: `per_round_s` at
        one slot (or where no count was calibrated), linear between calibrated counts, the widest
        calibrated count's beyond it."""
        points = [(1, self.per_round_s), *sorted(self.slot_rounds)]
        if slots <= 1 or len(points) == 1:
            return self.per_round_s
        for (low, low_s), (high, high_s) in zip(points, points[1:]):
            if slots <= high:
                return low_s + (high_s - low_s) * (slots - low) / (high - low)
        return points[-1][1]

    def at(self, slots: int) -> ServerLoop:
        """This loop as every round pays it with `slots` slots decoding together (its per-round
        cost `per_round_at`; the result holds no other count)."""
        return dataclasses.replace(self, per_round_s=self.per_round_at(slots), slot_rounds=())

    @property
    def reeval(self) -> float:
        """The factor on the draft model's second decode of a verified batch (1 where not calibrated)."""
        return 1.0 if self.draft_reeval is None else self.draft_reeval

    def round_s(self, drafted: int, kind: str, passes: int | None = None,
                draft_step: Callable[[int], float] | None = None, slots: int = 1) -> float:
        """What a round that drafted `drafted` tokens costs besides the target's T(L + 1); a
        draft model's round in `passes` passes (None: one per drafted token) with `draft_step`
        its last-row pass over k tokens through the bindings (required for a draft model);
        `slots`: the slots decoding in the same iteration (`per_round_at`)."""
        own = self.slot_share_s(drafted, kind, slots)
        if kind != DRAFT_MODEL:
            return own
        if draft_step is None:
            raise PolyplanError("server loop: a draft model's round needs the draft model's T_d(k)")
        return own + self.draft_pass_s(draft_step) * (drafted if passes is None else passes) + self.reeval * draft_step(drafted + 1)

    def slot_share_s(self, drafted: int, kind: str, slots: int = 1) -> float:
        """What a round costs its own slot alone, whatever the other slots do: the per-round cost
        at `slots` slots, its drafted rows' sampling, an n-gram type's call or a draft model's round
        set-up; not a draft model's passes and second decode, which llama-server batches across
        the slots (`round_s` adds them for one slot, the simulation under load for several)."""
        own = self.per_round_at(slots) + self.per_row_s * drafted
        if kind == NGRAM:
            return own + self.per_ngram_round_s
        if kind == DRAFT_MODEL:
            return own + self.per_draft_round_s
        return own

    def draft_pass_s(self, draft_step: Callable[[int], float]) -> float:
        """A draft model's one-row pass inside the server: the calibrated one, else the bindings' T_d(1)."""
        return draft_step(1) if self.per_draft_pass_s is None else self.per_draft_pass_s

    def text(self) -> str:
        """The costs in milliseconds, one clause each, as the export's notes print them."""
        parts = [f"{1e3 * self.per_request_s:.2f} ms/request", f"{1e3 * self.per_round_s:.2f} ms/round",
                 f"+{1e3 * self.per_row_s:.2f} ms/drafted row", f"n-gram +{1e3 * self.per_ngram_round_s:.2f} ms/round"]
        if self.per_draft_pass_s is not None:
            parts.append(f"draft model +{1e3 * self.per_draft_round_s:.2f} ms/round + {1e3 * self.per_draft_pass_s:.2f} ms/pass "
                         f"+ {self.reeval:.2f} x T_d(L + 1) re-evaluating the verified batch "
                         f"+ {1e3 * self.per_draft_prompt_token_s:.3f} ms/prompt token")
        parts += [f"{1e3 * seconds:.2f} ms/round a slot at {slots} slots" for slots, seconds in sorted(self.slot_rounds)]
        return ", ".join(parts)


NO_SERVER_LOOP = ServerLoop()


@dataclass(frozen=True)
class ServerRequest:
    """One calibration request as the server ran it: its kind (`KINDS`), the tokens each round
    drafted (0: a plain step), its decode seconds (`timings.predicted_ms` / 1000), its
    prompt's tokens, and a draft model's passes in each round (None: one per drafted token, as
    at a fixed K; a confidence stop adds one)."""

    kind: str
    drafted: tuple[int, ...]
    decode_s: float
    prompt_tokens: int = 0
    passes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise PolyplanError(f"server request: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.decode_s < 0 or any(item < 0 for item in self.drafted):
            raise PolyplanError("server request: negative decode time or draft length")
        if self.passes is not None and (len(self.passes) != len(self.drafted)
                                        or any(p < m for p, m in zip(self.passes, self.drafted))):
            raise PolyplanError("server request: passes must give each round at least as many passes as it drafted tokens")

    def round_passes(self) -> tuple[int, ...]:
        """A draft model's passes in each round."""
        return self.drafted if self.passes is None else self.passes

    def counts(self, draft_step: Callable[[int], float] | None = None) -> tuple[float, ...]:
        """How often each cost of `ServerLoop` was paid, in its fields' order (the re-evaluation as
        the seconds of `draft_step`(L + 1) over the rounds; required for a draft model's request)."""
        rounds, drafted = len(self.drafted), sum(self.drafted)
        if self.kind != DRAFT_MODEL:
            return (1.0, float(rounds), float(drafted), float(rounds if self.kind == NGRAM else 0), 0.0, 0.0, 0.0, 0.0)
        if draft_step is None:
            raise PolyplanError("server calibration: a draft model's requests need the draft model's T_d(k)")
        return (1.0, float(rounds), float(drafted), 0.0, float(rounds), float(sum(self.round_passes())),
                float(self.prompt_tokens), sum(draft_step(item + 1) for item in self.drafted))


def fit_server_loop(requests: Sequence[ServerRequest], step: Callable[[int], float],
                    draft_step: Callable[[int], float] | None = None) -> ServerLoop:
    """The server's costs from calibration `requests`: each request's decode time less the
    target's T(L + 1) of its rounds (`step`: the bindings' T(k)), fitted to
    `ServerRequest.counts` by non-negative least squares in two stages: the target alone's and
    the n-gram requests fit the shared costs and the n-gram round, then the draft model's
    requests, less those, fit its own (`draft_step`: its last-row pass through the bindings).
    Two stages, because a drafted row and a draft pass are paid together in every fixed-K round,
    so one joint fit lets the draft model's long requests pull the per-row cost. A cost no
    request paid is 0; the draft model's pass and re-evaluation are None without its requests.

    Raises:
        PolyplanError: no target-alone request (nothing pins the per-round cost), fewer
            requests than costs to fit, or draft-model requests without `draft_step`.
    """
    if not any(request.kind == TARGET_ALONE for request in requests):
        raise PolyplanError("server calibration: no target-alone request")
    shared, own = range(4), range(4, COSTS)
    plain = [request for request in requests if request.kind != DRAFT_MODEL]
    value = _fit_columns(plain, step, draft_step, shared, [0.0] * COSTS)
    drafted = [request for request in requests if request.kind == DRAFT_MODEL]
    if not drafted:
        return ServerLoop(*value[:5], None, value[6], None)
    value = _fit_columns(drafted, step, draft_step, own, value)
    return ServerLoop(*value)


def _fit_columns(requests: Sequence[ServerRequest], step: Callable[[int], float], draft_step, columns,
                 known: Sequence[float]) -> list[float]:
    """`known` with the costs of `columns` fitted to `requests` (non-negative least squares), the
    others held at their `known` values."""
    rows = [request.counts(draft_step) for request in requests]
    paid = [j for j in columns if any(row[j] for row in rows)]
    left = [request.decode_s - sum(step(item + 1) for item in request.drafted)
            - sum(known[j] * row[j] for j in range(COSTS) if j not in columns) for request, row in zip(requests, rows)]
    fitted = dict(zip(paid, fit_loop_costs([[row[j] for j in paid] for row in rows], left)))
    return [fitted.get(j, 0.0) if j in columns else known[j] for j in range(COSTS)]


def slot_round_cost(slots: int, requests: Sequence[tuple[float, int]], step_at_slots: float,
                    per_request_s: float = 0.0) -> float:
    """A slot's per-round cost with `slots` slots decoding together, from the target alone at
    `-np slots` serving `slots` equal requests at once, each as (decode seconds, rounds): the
    median of each request's seconds a round (its per-request cost taken off), less
    `step_at_slots` (the bindings' T(slots) timed in the same sitting), shared by the slots; never
    below 0 (an iteration cheaper than the bindings' pass is timing noise, not a server that pays a
    slot back).

    Raises:
        PolyplanError: fewer than 2 slots, or no request with a round.
    """
    if slots < 2:
        raise PolyplanError(f"server calibration at several slots: {slots} slot(s); the one-slot loop is fitted by fit_server_loop")
    steps = [(seconds - per_request_s) / rounds for seconds, rounds in requests if rounds > 0]
    if not steps:
        raise PolyplanError(f"server calibration at {slots} slots: no request decoded a round")
    return max(0.0, (statistics.median(steps) - step_at_slots) / slots)


def draft_model_speedup(loop: ServerLoop, per_token_s: float, baseline_s: float,
                        requests: Sequence[tuple[int, int]]) -> float:
    """A draft model's decode speedup over the target alone in llama-server for `requests`
    ((prompt tokens, tokens decoded after the prefill's first) each): `per_token_s` and
    `baseline_s` by the exact model, plus the per-request cost on both sides and the draft model's
    prefill of each prompt."""
    fixed = loop.per_request_s * len(requests)
    tokens = sum(decoded for _, decoded in requests)
    prefill = loop.per_draft_prompt_token_s * sum(prompt for prompt, _ in requests)
    return (fixed + baseline_s * tokens) / (fixed + prefill + per_token_s * tokens)
