"""The settings of a profiling run (besides the models and the prompts)."""

from __future__ import annotations

from dataclasses import dataclass, field

from polyplan.formats.errors import PolyplanError
from polyplan.formats.sampling import SamplingMode
from polyplan.profiler.forward_timing import LatencySettings

__all__ = ["AcceptanceSettings", "LatencySettings", "ProfileSettings"]


@dataclass(frozen=True)
class AcceptanceSettings:
    """How acceptance is measured.

    Attributes:
        temperatures: sampling modes (0 = greedy); each gets its own α and decoded μ.
        block_sizes: K at which the decoded μ is measured.
        new_tokens: tokens the target generates per prompt (the teacher-forced contexts) and
            tokens each decoded run produces per prompt.
        decoded_prompts: decoded runs use the first this-many prompts (None: all, as α does).
        decoded_verifications, decoded_min_prompts: a decoded run stops taking prompts once it
            has this many verifications from at least `decoded_min_prompts` prompts (None: never),
            since pairs with few tokens per verification reach a precision on fewer prompts
            and cost the most per prompt; or, sooner, once at least `decoded_min_prompts` prompts
            give a μ interval that holds the μ the teacher-forced pass implies for the pair
            (`profiler.acceptance.decoded_measurement`: it confirmed what was known).
        decoded: measure decoded μ at all (False: distribution-based α only).
        decoded_until_confirmed: a pair's runs that must really decode (not replayed) go from
            the largest block size down and stop at the first whose run confirms the μ the
            teacher-forced pass implies; the pair's smaller block sizes then keep eq. 3's μ from α;
            and only pairs the target verifies are decoded (`profiler.run._Run._not_decoded`). What
            a plan measures (`recommend --candidates`, the demo), since the exact model reads the
            agreement, not the decoded μ; `polyplan profile` decodes every pair at every block size.
        seed: prompt i is generated with seed + i.
        resamples, confidence: the bootstrap (resamples over prompts, interval level).
        disagreement: relative gap between decoded and implied μ above which a pair is flagged.
    """

    temperatures: tuple[float, ...] = (0.0, 1.0)
    block_sizes: tuple[int, ...] = (2, 4)
    new_tokens: int = 128
    decoded_prompts: int | None = None
    decoded_verifications: int | None = 160
    decoded_min_prompts: int = 4  # with the default runs, this many prompts hold the verifications at K = 2
    decoded: bool = True
    decoded_until_confirmed: bool = False
    seed: int = 0
    resamples: int = 1000
    confidence: float = 0.95
    disagreement: float = 0.10

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise PolyplanError("temperatures: give at least one (0 is greedy)")
        keys = [SamplingMode(t).key for t in self.temperatures]
        if len(set(keys)) != len(keys):
            raise PolyplanError(f"temperatures: duplicate values in {list(self.temperatures)}")
        if not self.block_sizes or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.block_sizes):
            raise PolyplanError(f"block_sizes: need integers >= 1, got {list(self.block_sizes)}")
        if len(set(self.block_sizes)) != len(self.block_sizes):
            raise PolyplanError(f"block_sizes: duplicate values in {list(self.block_sizes)}")
        for name, least in (("new_tokens", 2), ("decoded_prompts", 1), ("decoded_verifications", 1),
                            ("decoded_min_prompts", 1)):
            if getattr(self, name) is not None and getattr(self, name) < least:
                raise PolyplanError(f"{name}: must be >= {least}, got {getattr(self, name)}")
        if not 0.0 < self.confidence < 1.0:
            raise PolyplanError(f"confidence: must be in (0, 1), got {self.confidence}")
        if self.resamples < 10:
            raise PolyplanError(f"resamples: must be >= 10, got {self.resamples}")


@dataclass(frozen=True)
class ProfileSettings:
    """Everything a profiling run is parameterised by (besides models and prompts)."""

    latency: LatencySettings = field(default_factory=LatencySettings)
    acceptance: AcceptanceSettings = field(default_factory=AcceptanceSettings)
