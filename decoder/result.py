"""What one run of a chain returns: the new tokens and the per-level counts the theory predicts."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class PassTally:
    """A member's forward passes of one width in one run: how many, their time, and the mean
    context (tokens already cached) they started from."""

    width: int
    passes: int
    seconds: float
    mean_context: float


@dataclass(frozen=True)
class LevelStats:
    """Counts for one chain member M_i over one `generate` call. The verification counts belong to
    the *verifier*: M_n verifies nothing, so its are zero and empty (as are M_1's when n = 1).

    Attributes:
        model: The member's name.
        forward_passes: Forward passes of this member (φ_i), the prompt prefill included
            (it is fused with the member's first pass).
        tokens_drafted: Drafted tokens this member verified (the sub-chain below handed it).
        tokens_accepted: Of those, the accepted ones.
        tokens_per_verification: Tokens each verification produced (accepted + 1 recovered or
            bonus), in order: the samples of L_i (μ, σ); the top level's last entry counts
            tokens cut off by `max_new_tokens` or EOS too.
        wall_time_s: Time inside this member's `forward` (launch time on an asynchronous device).
        passes: The forward passes by width, narrowest first, to compare with the profile's
            T_i(width) at the same context.
    """

    model: str
    forward_passes: int
    tokens_drafted: int
    tokens_accepted: int
    tokens_per_verification: tuple[int, ...]
    wall_time_s: float
    passes: tuple[PassTally, ...] = ()

    @property
    def verifications(self) -> int:
        return len(self.tokens_per_verification)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted (NaN when nothing was drafted)."""
        return self.tokens_accepted / self.tokens_drafted if self.tokens_drafted else float("nan")

    @property
    def mean_tokens_per_verification(self) -> float:
        """μ: mean tokens per verification (NaN without verifications)."""
        return statistics.fmean(self.tokens_per_verification) if self.tokens_per_verification else float("nan")


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of `generate`: the new tokens only (EOS included when it `stopped_at_eos`), one
    `LevelStats` per member (target first), and the call's wall time."""

    token_ids: tuple[int, ...]
    levels: tuple[LevelStats, ...]
    wall_time_s: float
    stopped_at_eos: bool

    @property
    def tokens_per_target_pass(self) -> float:
        """New tokens per forward pass of the target (Spec-Bench's mean accepted tokens, τ);
        the prefill counts as a pass, as it is fused with the first one. NaN without passes."""
        passes = self.levels[0].forward_passes if self.levels else 0
        return len(self.token_ids) / passes if passes else float("nan")
