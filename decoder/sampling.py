"""How logits become the distributions every level of a chain samples from and verifies with.

The same `Sampling` (temperature, then top-k, then top-p) is applied to every member's logits,
so speculative decoding is lossless with respect to the target's *transformed* distribution,
which is what plain sampling with those settings draws. Greedy needs only argmaxes (`argmax_ids`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from polyplan.formats.errors import PolyplanError


@dataclass(frozen=True)
class Sampling:
    """Sampling settings shared by every level of a chain.

    Attributes:
        temperature: 0 means greedy (argmax at every level); otherwise logits are divided by it.
        top_k: Keep only the k most likely tokens (None keeps all).
        top_p: Keep the smallest set of most likely tokens whose mass reaches top_p (1 keeps all).
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise PolyplanError(f"temperature: {self.temperature} must be a finite number >= 0 (0 means greedy)")
        if self.top_k is not None and self.top_k < 1:
            raise PolyplanError(f"top_k: {self.top_k} must be >= 1 (or None to keep every token)")
        if not (0.0 < self.top_p <= 1.0):
            raise PolyplanError(f"top_p: {self.top_p} must lie in (0, 1]")

    @property
    def greedy(self) -> bool:
        """True when every level takes the argmax (temperature 0)."""
        return self.temperature == 0.0


def probabilities(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Logits `(k, V)` to sampling distributions `(k, V)`; not for greedy (no one-hot rows are made)."""
    scaled = logits.float()  # (k, V)
    if sampling.temperature != 1.0:
        scaled = scaled / sampling.temperature
    vocab = scaled.shape[-1]
    if sampling.top_k is not None and sampling.top_k < vocab:
        kth = torch.topk(scaled, sampling.top_k, dim=-1).values[:, -1:]  # (k, 1)
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    probs = torch.softmax(scaled, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Drop a token when the mass strictly before it already reaches top_p; the most
        # likely token is always kept, so no row becomes empty.
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(before >= sampling.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(weights: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of non-negative `weights` `(k, V)` (rows need not sum to 1): `(k,)` int64.
    The exponential race argmax(w / E), E ~ Exp(1), as gpt-fast does: one kernel for all rows and
    no device-to-host synchronisation, unlike `torch.multinomial` on a GPU."""
    race = torch.empty_like(weights).exponential_(1.0, generator=generator)
    # An exact zero from the exponential would turn a zero weight into 0/0 = NaN, which
    # argmax treats as the maximum.
    race.clamp_min_(torch.finfo(race.dtype).tiny)
    return (weights / race).argmax(dim=-1)


def argmax_ids(logits: torch.Tensor) -> torch.Tensor:
    """The greedy choice of each row of `logits` `(k, V)`: `(k,)` int64, the lowest id on ties and a
    NaN the maximum (`torch.argmax`'s rules). On the CPU numpy's argmax scans the same memory faster."""
    if logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64):
        return torch.from_numpy(logits.detach().numpy().argmax(axis=-1))
    return logits.argmax(dim=-1)


def top_probability(logits: torch.Tensor, among: int | None = None) -> torch.Tensor:
    """Each row's top softmax probability at temperature 1, 1 / Σ exp(l − max l): `(k,)`, a drafter's
    confidence (`formats.plan.DraftPolicy.p_min`). `among`: over each row's `among` largest logits
    only, as llama-server's draft-simple reads it (`formats.profile.DRAFT_SIMPLE_TOP_K`)."""
    if among is None:
        rows = logits.double()
    else:  # the same `among` values at any precision: only they are widened
        rows = logits.topk(min(among, logits.shape[-1]), dim=-1).values.double()  # (k, among), the largest first
    top = rows.max(dim=-1, keepdim=True).values  # (k, 1)
    return 1.0 / torch.exp(rows - top).sum(dim=-1)
