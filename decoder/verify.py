"""One verification step of speculative decoding, vectorised over the drafted block.

Notation (the paper's and docs/design.md's): **p** is the drafter's distribution, **q** the
verifier's. A drafted token x is *accepted* with probability min(1, q(x)/p(x)); at the first
rejection the step emits a *recovered* token drawn from norm(max(0, q − p)) and stops; when
every drafted token is accepted it emits a *bonus* token drawn from q at the position after
the block. The emitted token is then distributed exactly as q (vLLM's rejection sampler uses
the same words: accepted, recovered, bonus).

Both functions return the same two tensors so the decoder reads them with ONE device-to-host
transfer per step:
    accepted  (m,)   bool  — whether drafted token j passes its test (only the leading run counts)
    emitted   (m+1,) int64 — the token emitted if the first rejection is at j (j < m), or the
                             bonus token (j = m)
Drawing a recovered candidate at every position costs one (m, V) kernel instead of a
host round trip to learn where the first rejection is; the candidate at the first rejection
is still an exact draw from its residual, because the coins that decide acceptance are
independent of the candidate draws.
"""

from __future__ import annotations

import torch

from polyplan.decoder.sampling import sample


def acceptance_probability(p_draft: torch.Tensor, q_draft: torch.Tensor) -> torch.Tensor:
    """min(1, q(x)/p(x)) elementwise, given p(x) and q(x) of the drafted tokens; 1 where p(x) = 0
    (such a token cannot have been drafted), so analytic sums over the vocabulary stay free of 0/0."""
    # q/0 is inf (or NaN when q is 0 too); both become 1 after the cap.
    return (q_draft / p_draft).nan_to_num_(nan=1.0).clamp_(max=1.0)


def recovery_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, q − p)) row-wise over `(..., V)`. When the residual is empty (q == p up to
    rounding) a rejection has probability zero, and the row falls back to q instead of 0/0."""
    residual = (q - p).clamp_min_(0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass, q)


def verify_greedy(q_argmax: torch.Tensor, draft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification: p and q are one-hot argmaxes, so accept iff the tokens agree.
    `q_argmax` `(m+1,)`: the verifier's argmax at the m drafted positions and the one after;
    `draft` `(m,)`. Returns accepted `(m,)` bool, emitted `(m+1,)` int64 (`q_argmax` itself)."""
    return q_argmax[:-1] == draft, q_argmax


def verify_sampled(
    p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stochastic verification of a drafted block: `p` `(m, V)` the drafter's distributions at the
    drafted positions, `q` `(m+1, V)` the verifier's there and at the one after, `draft` `(m,)` with
    draft[j] ~ p[j]; every random number from `generator`. Returns accepted `(m,)` bool, emitted
    `(m+1,)` int64 (module docstring)."""
    m = draft.shape[0]
    index = draft.unsqueeze(-1)  # (m, 1)
    p_draft = p.gather(-1, index).squeeze(-1)  # (m,)
    q_draft = q[:m].gather(-1, index).squeeze(-1)  # (m,)
    coins = torch.rand(m, generator=generator, device=q.device, dtype=q.dtype)
    accepted = coins < acceptance_probability(p_draft, q_draft)
    candidates = torch.cat([recovery_distribution(p, q[:m]), q[m:]])  # (m+1, V)
    return accepted, sample(candidates, generator)
