"""Bounds before measurement: the best a drafter could give its verifier, from latency curves alone.

Before any acceptance of a pair (verifier M_v, drafter M_d) is measured, its latency curves already
bound what it can give: priced as the exact model (`planner.exact.cost_model`) prices the two-model
chain [M_v, M_d], a round that hands up K tokens costs

    drafting D(K)   a model drafter: K · (T_d(1) + p) + s_d(K)  (K passes after the verifier's:
                    its first K switch costs); a rule drafter: T_d(1) + p + s_d(1), one call
                    whatever it drafts (`ngram_simple_sizes`)
    catch-up  u     a model drafter's pass over two tokens after a fully accepted round:
                    max(0, T_d(2) − T_d(1)); none for a rule drafter
    verify    V(K)  T̃_v(K + 1) + s_v(1) + r: the verifier's pass at its monotone envelope
                    (`planner.exact.verify_width`), a 1st pass after a switch, and the round's loop cost

with p and r the loop's cost per step and per round (`planner.exact.overhead`), and it emits at
most K + 1 tokens. Over the verifier alone (T_v(1) + p a token), perfect acceptance gives

    S(K) = (K + 1) · (T_v(1) + p) / (D(K) + min(u, T_d(1) + p) + V(K)),   K = 1 … k_max,

and S(0) = (T_v(1) + p) / (D(0) + V(0)), D(0) = T_d(1) + p + s_d(1): a round that hands up nothing
(a rule drafter's miss, a model drafter's confidence stop at once: the policy replay makes no other
empty round of a model drafter). The bound is max over K = 0 … k_max of S(K).

Why it is an upper bound of the exact model's speedup of [M_v, M_d] at any acceptance (i.i.d.,
measured runs, a rule drafter's replayed rounds, a draft policy) and any block size up to k_max:
the exact speedup is E[tokens] · (T_v(1) + p) / E[seconds] over a round, at most the largest
ratio of a single round, and every round is covered. A round drafting m tokens, all accepted,
costs at least D(m) + u' + V(m) (u' = min(u, T_d(1) + p) <= u; a confidence stop's extra pass costs
more than u') and emits m + 1: at most S(m). A round with a rejection emits at most m tokens and
costs at least D(m) + V(m) >= D(m − 1) + u' + V(m − 1) (one step more, V never decreasing), so at
most S(m − 1), or S(1) when m = 1. The cap u' changes nothing on real curves (two tokens in one pass
cost no more than two passes: T_d(2) <= 2 T_d(1) + p); where it binds, the price at a rejection
could otherwise beat the price at perfect acceptance. S(0) never exceeds max(1, S(1)), so it
matters only for a drafter that cannot pay; the best K reported is one of 1 … k_max.

With a free rule drafter S(K) is the physical limit's (`planner.exact.physical_limit`); a costly
drafter's bound sits below it. What it leaves out: a drafter as an intermediate level (it then
verifies a cheaper drafter's blocks, and its passes can cost less per token than its own steps),
and block sizes beyond k_max (pass the search's). docs/cost-model.md, "Bounds before measurement".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq

from polyplan.formats.errors import PolyplanError
from polyplan.formats.options import integer_at_least
from polyplan.formats.overhead import NO_OVERHEAD, NO_SWITCH, LoopOverhead
from polyplan.formats.profile import Profile
from polyplan.planner.exact.cost_model import ChainSettings
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.planner.exact.ngram_replay import ngram_simple_sizes
from polyplan.planner.exact.overhead import profile_overhead, profile_switch_costs, switch_total
from polyplan.planner.exact.required_drafter import tokens_per_verification
from polyplan.planner.exact.verify_width import monotone_envelope
from polyplan.planner.paper.capped_geometric import check_block_size
from polyplan.planner.paper.lemma31 import check_positive

_ACCEPTANCE_GRID = np.concatenate([np.linspace(0.0, 1.0, 1025)[:-1], 1.0 - np.logspace(-4, -12, 9)])


@dataclass(frozen=True)
class PairPrices:
    """The exact model's prices of one round of the pair, per K = 0 … k_max (module docstring)."""

    baseline: float  # T_v(1) + p: the verifier alone, per token
    drafting: tuple[float, ...]  # D(K): the drafter's calls of a round handing up K tokens
    verify: tuple[float, ...]  # V(K): the verifier's pass over K + 1 tokens, with its switch and the round's loop cost
    catch_up: float  # u: a model drafter's catch-up pass after a fully accepted round (0: a rule drafter)
    step: float  # T_d(1) + p: one drafting step, the most the bound charges for the catch-up

    @property
    def k_max(self) -> int:
        return len(self.drafting) - 1

    def perfect(self, block_size: int) -> float:
        """S(K): every drafted token accepted (K = 0: a round that hands up nothing)."""
        k = block_size
        if k == 0:
            return self.baseline / (self.drafting[0] + self.verify[0])
        return (k + 1) * self.baseline / (self.drafting[k] + min(self.catch_up, self.step) + self.verify[k])

    def iid(self, acceptance: float, block_size: int) -> float:
        """What the exact model predicts when K tokens are drafted each round, each accepted i.i.d.
        at rate α (the catch-up paid in the share α^K of rounds accepted whole); for a rule drafter,
        as if it drafted all K in its one call."""
        k = check_block_size(block_size, "block_size")
        if k > self.k_max:
            raise PolyplanError(f"block_size: at most {self.k_max} (the bound's k_max), got {k}")
        alpha = float(acceptance)
        if not 0.0 <= alpha <= 1.0:
            raise PolyplanError(f"acceptance: must be in [0, 1], got {acceptance!r}")
        seconds = self.drafting[k] + alpha**k * self.catch_up + self.verify[k]
        return tokens_per_verification(alpha, k) * self.baseline / seconds


@dataclass(frozen=True)
class PairBound:
    """The best speedup a drafter could give its verifier with perfect acceptance (module docstring)."""

    verifier: str
    drafter: str
    speedup: float  # max over K of S(K); above 1 the drafter could pay, at or below 1 it cannot at any acceptance
    block_size: int  # the K reaching `speedup` (0 when no K beats the verifier alone)
    cost_ratio: float  # c = T_d(1) / T_v(1)
    prices: PairPrices | None = field(default=None, repr=False, compare=False)  # what `required_acceptance` reads

    @property
    def can_pay(self) -> bool:
        return self.speedup > 1.0

    def required_acceptance(self, over: float) -> float | None:
        """The least i.i.d. acceptance α at which this drafter under this verifier reaches a speedup
        of `over` at its best K (`PairPrices.iid`); None when no α < 1 does at any K up to k_max."""
        return required_acceptance_at(self, over)[0]

    def text(self) -> str:
        """One line: the bound, its K and the drafter's cost."""
        head = f"{self.verifier} <- {self.drafter}: at best x{self.speedup:.2f}"
        cost = f"(cost {self.cost_ratio:.2g} of a {self.verifier} step)"
        if not self.can_pay:
            return f"{head} with perfect acceptance: cannot pay {cost}"
        return f"{head} at K = {self.block_size} with perfect acceptance {cost}"


def required_acceptance_at(bound: PairBound, over: float) -> tuple[float | None, int | None]:
    """`PairBound.required_acceptance` with the K it is reached at (the smallest on a tie;
    (None, None) when unreachable)."""
    target = check_positive(over, "over")
    prices = bound.prices
    if prices is None:
        raise PolyplanError(f"{bound.verifier} <- {bound.drafter}: made without its prices (use pair_bound)")
    best: tuple[float, int] | None = None
    for k in range(1, prices.k_max + 1):
        alpha = _least_acceptance(prices, k, target)
        if alpha is not None and (best is None or alpha < best[0]):
            best = (alpha, k)
    return (None, None) if best is None else best


def _least_acceptance(prices: PairPrices, k: int, over: float) -> float | None:
    """The least α in [0, 1) with `prices.iid(α, k) >= over`: the first grid point that reaches it,
    then the crossing in the cell below it (None when no grid point below 1 does)."""
    powers = _ACCEPTANCE_GRID[:, None] ** np.arange(k + 1)
    values = powers.sum(axis=1) * prices.baseline / (prices.drafting[k] + powers[:, k] * prices.catch_up + prices.verify[k])
    reached = np.flatnonzero(values >= over)
    if reached.size == 0:
        return None
    first = int(reached[0])
    if first == 0:
        return 0.0
    low, high = float(_ACCEPTANCE_GRID[first - 1]), float(_ACCEPTANCE_GRID[first])
    return float(brentq(lambda a: prices.iid(a, k) - over, low, high, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def _reading(profile: Profile, settings: ChainSettings | None) -> tuple[int | None, LoopOverhead | None]:
    """Where the curves are read and the loop overhead charged (`pair_prices`)."""
    if settings is None:
        return None, profile_overhead(profile, "greedy")
    return settings.context_length, settings.overhead


def pair_prices(profile: Profile, verifier: str, drafter: str, *, k_max: int = 16,
                settings: ChainSettings | None = None) -> PairPrices:
    """The pair's round prices on `profile`'s latency curves (module docstring): read at
    `settings.context_length` with `settings.overhead`, or, with `settings` None, averaged over the
    contexts with the loop overhead the profile records at greedy (what `recommend` charges)."""
    integer_at_least(k_max, 1, "k_max")
    if verifier == drafter:
        raise PolyplanError(f"pair: {verifier!r} cannot draft for itself")
    context_length, overhead = _reading(profile, settings)
    loop = NO_OVERHEAD if overhead is None else overhead
    upper = curve_from_profile(profile.model(verifier), context_length)
    lower = curve_from_profile(profile.model(drafter), context_length)
    switches = profile_switch_costs(profile)
    upper_switch, lower_switch = switches.get(verifier, NO_SWITCH), switches.get(drafter, NO_SWITCH)
    step = lower(1) + loop.per_step_s
    one_call = step + switch_total(lower_switch, 1)
    ks = np.arange(0, k_max + 1)
    verify = monotone_envelope(upper).many(ks + 1.0) + upper_switch[0] + loop.per_round_s
    if drafter in ngram_simple_sizes(profile):
        drafting, catch_up = [one_call] * (k_max + 1), 0.0
    else:
        drafting = [one_call] + [k * step + switch_total(lower_switch, k) for k in range(1, k_max + 1)]
        catch_up = max(0.0, lower(2) - lower(1))
    return PairPrices(upper(1) + loop.per_step_s, tuple(float(d) for d in drafting), tuple(float(v) for v in verify),
                      float(catch_up), float(step))


def pair_bound(profile: Profile, verifier: str, drafter: str, *, k_max: int = 16,
               settings: ChainSettings | None = None) -> PairBound:
    """The bound of `drafter` under `verifier` over block sizes 1 … `k_max` (module docstring;
    `settings` as in `pair_prices`). Only latency curves, loop and switch costs are read: the
    profile may hold no pair yet."""
    prices = pair_prices(profile, verifier, drafter, k_max=k_max, settings=settings)
    speedups = [prices.perfect(k) for k in range(k_max + 1)]
    best = max(speedups)
    block = 1 + int(np.argmax(speedups[1:])) if best > 1.0 else 0
    context_length, _ = _reading(profile, settings)
    ratio = curve_from_profile(profile.model(drafter), context_length)(1) / curve_from_profile(profile.model(verifier), context_length)(1)
    return PairBound(verifier, drafter, float(best), block, float(ratio), prices)


def pair_bounds(profile: Profile, pairs: Iterable[tuple[str, str]], *, k_max: int = 16,
                settings: ChainSettings | None = None) -> tuple[PairBound, ...]:
    """`pair_bound` of each (verifier, drafter) in `pairs`, in order."""
    return tuple(pair_bound(profile, verifier, drafter, k_max=k_max, settings=settings) for verifier, drafter in pairs)


def middle_bound(profile: Profile, target: str, member: str, *, k_max: int = 16,
                 settings: ChainSettings | None = None) -> float:
    """The best speedup `member` could give `target` directly under it whatever drafts below it.

    As an intermediate level the member hands up tokens it has verified, a round of its own over
    m + 1 tokens costing at least T̃_m(m + 1) + s_m(1) + r and yielding at most m + 1 of them, so a
    token it hands up costs at least c = min over m of that ratio (m = 0 … k_max: alone, it is its
    own step). A target round handing up X tokens then costs at least X · c + T̃_t(X + 1) + s_t(1) + r
    and emits at most X + 1: the bound is max over X = 1 … 2 k_max of (X + 1)(T_t(1) + p) over that
    (the loop's per-step cost left out of the member's share, which only lowers the price)."""
    integer_at_least(k_max, 1, "k_max")
    context_length, overhead = _reading(profile, settings)
    loop = NO_OVERHEAD if overhead is None else overhead
    switches = profile_switch_costs(profile)
    lower = monotone_envelope(curve_from_profile(profile.model(member), context_length))
    upper = curve_from_profile(profile.model(target), context_length)
    widths = np.arange(1, k_max + 2, dtype=float)
    per_token = float(np.min((lower.many(widths) + switches.get(member, NO_SWITCH)[0] + loop.per_round_s) / widths))
    if member in ngram_simple_sizes(profile):
        per_token = 0.0  # a rule drafter verifies nothing: its own bound is the pair bound, this one only loosens it
    handed = np.arange(1, 2 * k_max + 1, dtype=float)
    price = handed * per_token + monotone_envelope(upper).many(handed + 1) + switches.get(target, NO_SWITCH)[0] + loop.per_round_s
    return float(np.max((handed + 1) * (upper(1) + loop.per_step_s) / price))


def bounded_pairs(profile: Profile, pairs: Iterable[tuple[str, str]], target: str, *, k_max: int = 16,
                  settings: ChainSettings | None = None,
                  bounds: Mapping[tuple[str, str], PairBound] | None = None) -> dict[tuple[str, str], str]:
    """The pairs whose acceptance cannot change the choice, each with the reason in one line.

    A member that can pay neither as the target's drafter (`pair_bound`) nor as an intermediate
    level (`middle_bound`) makes no chain beat the target alone directly under it; every pair it
    verifies is then moot too. A pair (verifier, drafter) under another verifier whose bound cannot
    pay only slows that verifier down. The profiler measures such pairs briefly (a few prompts, no
    decoded runs) so that their α is still shown, with its interval. `bounds`: `pair_bound`s
    already computed with the same `k_max` and `settings` (the profiler's), read instead of
    computed again."""
    pairs = list(pairs)
    known = dict(bounds or {})

    def bound_of(verifier: str, drafter: str) -> PairBound:
        if (verifier, drafter) not in known:
            known[(verifier, drafter)] = pair_bound(profile, verifier, drafter, k_max=k_max, settings=settings)
        return known[(verifier, drafter)]

    moot: dict[tuple[str, str], str] = {}
    members = {name for pair in pairs for name in pair if name != target}
    useless = {}
    for member in sorted(members):
        direct = bound_of(target, member)
        middle = middle_bound(profile, target, member, k_max=k_max, settings=settings)
        if not direct.can_pay and middle <= 1.0:
            useless[member] = (f"{direct.text()}; as an intermediate level at best x{middle:.2f}")
    for verifier, drafter in pairs:
        if verifier == target and drafter in useless:
            moot[(verifier, drafter)] = useless[drafter]
        elif verifier in useless:
            moot[(verifier, drafter)] = f"{verifier} cannot pay under {target}: {useless[verifier]}"
        elif verifier != target:
            bound = bound_of(verifier, drafter)
            if not bound.can_pay:
                moot[(verifier, drafter)] = bound.text()
    return moot
