"""llama-server's own decoding loop: what a request costs besides the target's forward passes.

The bindings' T(k) (`decoder.llama_cpp`, timed by `profiler.forward_timing`) is one
`llama_decode` of k tokens. llama-server spends more per round: its sampler chain over the
whole vocabulary for every row it verifies, the speculative implementation's draft call and
bookkeeping, a draft model's own decode and sampling for each drafted token, the slot's
state. Its predicted speedups missed by 20–35 % while those costs were left out. So a request's
decode time (the server's own `timings.predicted_ms`: from the first token, which the prefill
gives, to the last) is modelled as

    decode = per_request + Σ_rounds [T(L + 1) + per_round + per_row · L
                                     + (per_spec_round + per_draft_token · L) if it drafts by a model
                                        or per_spec_round                      if an n-gram type runs]
             + per_draft_prompt_token · prompt tokens                           if it drafts by a model

with L the tokens a round drafted: `ServerLoop` holds the costs (n-gram and draft-model rounds
each have their own `per_spec_round`), `fit_server_loop` fits them by non-negative least squares
(`planner.exact.overhead.fit_loop_costs`) from calibration requests whose rounds are known
(`ServerRequest`: target alone, every round one token; an n-gram type, its rounds replayed on
the server's own output; a draft model at a fixed K, K tokens a round). The last term is the
draft model's prefill: llama-server's draft model reads the prompt in its first draft call,
inside the decode time the server reports (Qwen2.5-Coder 0.5B drafting for the 1.5B at one
thread, K = 6, a ~140-token prompt: 1.0-1.1 s for 8 new tokens in one round, of which the
bindings' T(k) account for about 0.3 s; rough, a shared core), so a draft model's decode speedup
depends on the prompt and the tokens generated (`draft_model_speedup`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.overhead import fit_loop_costs

TARGET_ALONE, NGRAM, DRAFT_MODEL = "target", "ngram", "draft-model"
KINDS = (TARGET_ALONE, NGRAM, DRAFT_MODEL)


@dataclass(frozen=True)
class ServerLoop:
    """llama-server's seconds outside the bindings' T(k) (module docstring).

    Attributes:
        per_request_s: once per request's decode.
        per_round_s: every target pass (sampling the first row, the slot's bookkeeping).
        per_row_s: every drafted row the target verifies (its sampling).
        per_ngram_round_s: a round of an n-gram type (its draft call and accept).
        per_draft_round_s: a round with a draft model (its batch of the accepted tokens, set-up).
        per_draft_token_s: a draft model's drafted token inside the server: its forward pass and
            sampling (None: not calibrated; the bindings' T_d(1) is used then).
        per_draft_prompt_token_s: a draft model's prefill, per prompt token, inside the decode time.
    """

    per_request_s: float = 0.0
    per_round_s: float = 0.0
    per_row_s: float = 0.0
    per_ngram_round_s: float = 0.0
    per_draft_round_s: float = 0.0
    per_draft_token_s: float | None = None
    per_draft_prompt_token_s: float = 0.0

    def round_s(self, drafted: int, kind: str) -> float:
        """What a round that drafted `drafted` tokens costs besides the target's T(L + 1)."""
        extra = self.per_round_s + self.per_row_s * drafted
        if kind == NGRAM:
            return extra + self.per_ngram_round_s
        if kind == DRAFT_MODEL:
            return extra + self.per_draft_round_s + (self.per_draft_token_s or 0.0) * drafted
        return extra

    def text(self) -> str:
        """`4.1 ms/request, 2.30 ms/round + 0.21 ms/verified row, n-gram +0.05 ms/round, ...`."""
        parts = [f"{1e3 * self.per_request_s:.2f} ms/request", f"{1e3 * self.per_round_s:.2f} ms/round",
                 f"+{1e3 * self.per_row_s:.2f} ms/drafted row", f"n-gram +{1e3 * self.per_ngram_round_s:.2f} ms/round"]
        if self.per_draft_token_s is not None:
            parts.append(f"draft model +{1e3 * self.per_draft_round_s:.2f} ms/round + {1e3 * self.per_draft_token_s:.2f} ms/drafted token "
                         f"+ {1e3 * self.per_draft_prompt_token_s:.3f} ms/prompt token")
        return ", ".join(parts)


NO_SERVER_LOOP = ServerLoop()


@dataclass(frozen=True)
class ServerRequest:
    """One calibration request as the server ran it: its kind (`KINDS`), the tokens each round
    drafted (0: a plain step), its decode seconds (`timings.predicted_ms` / 1000) and its
    prompt's tokens."""

    kind: str
    drafted: tuple[int, ...]
    decode_s: float
    prompt_tokens: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise PolyplanError(f"server request: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.decode_s < 0 or any(item < 0 for item in self.drafted):
            raise PolyplanError("server request: negative decode time or draft length")

    def counts(self) -> tuple[float, ...]:
        """How often each cost of `ServerLoop` was paid: request, rounds, drafted rows, n-gram
        rounds, draft-model rounds, draft-model tokens, draft-model prompt tokens."""
        rounds, drafted, model = len(self.drafted), sum(self.drafted), self.kind == DRAFT_MODEL
        return (1.0, float(rounds), float(drafted), float(rounds if self.kind == NGRAM else 0),
                float(rounds if model else 0), float(drafted if model else 0), float(self.prompt_tokens if model else 0))


def fit_server_loop(requests: Sequence[ServerRequest], step: Callable[[int], float]) -> ServerLoop:
    """The server's costs from calibration `requests`: each request's decode time less the
    target's T(L + 1) of its rounds (`step`: the bindings' T(k)), fitted to the counts of
    `ServerRequest.counts` (non-negative least squares). A cost no request paid is 0; the
    draft-model token cost is None without draft-model requests.

    Raises:
        PolyplanError: no target-alone request (nothing pins the per-round cost), or fewer
            requests than costs to fit.
    """
    if not any(request.kind == TARGET_ALONE for request in requests):
        raise PolyplanError("server calibration: no target-alone request")
    rows = [request.counts() for request in requests]
    paid = [j for j in range(7) if any(row[j] for row in rows)]
    left = [request.decode_s - sum(step(item + 1) for item in request.drafted) for request in requests]
    design = [[row[j] for j in paid] for row in rows]
    fitted = dict(zip(paid, fit_loop_costs(design, left)))
    value = [fitted.get(j, 0.0) for j in range(7)]
    drafter = any(request.kind == DRAFT_MODEL for request in requests)
    return ServerLoop(value[0], value[1], value[2], value[3], value[4], value[5] if drafter else None, value[6])


def request_seconds(loop: ServerLoop, step: Callable[[int], float], drafted: Sequence[int], kind: str,
                    prompt_tokens: int = 0) -> float:
    """A request's predicted decode seconds: its rounds' T(L + 1) and the server's costs."""
    prefill = loop.per_draft_prompt_token_s * prompt_tokens if kind == DRAFT_MODEL else 0.0
    return loop.per_request_s + prefill + sum(step(item + 1) + loop.round_s(item, kind) for item in drafted)


def draft_model_speedup(loop: ServerLoop, per_token_s: float, baseline_s: float,
                        requests: Sequence[tuple[int, int]]) -> float:
    """A draft model's decode speedup over the target alone in llama-server for `requests`
    ((prompt tokens, decoded tokens) each: the tokens after the prefill's first): `per_token_s`
    its seconds per token by the exact model, `baseline_s` the target alone's (both with the
    server's per-round costs), each request paying the server's per-request cost on both sides
    and the draft model's prefill of its prompt (module docstring)."""
    fixed = loop.per_request_s * len(requests)
    tokens = sum(decoded for _, decoded in requests)
    prefill = loop.per_draft_prompt_token_s * sum(prompt for prompt, _ in requests)
    return (fixed + baseline_s * tokens) / (fixed + prefill + per_token_s * tokens)
