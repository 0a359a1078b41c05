"""report.json: what `polyplan validate` (and the demo) writes beside report.md and prints with
`--json` (`validation.reporting.report_of` builds one). Its layout, key by key: docs/validation.md,
"The report"; what each number means is `validation.results`' business, not this module's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from polyplan.formats.codec import EMPTY, NONE, FileFormat, decode_file, encode_file, read_file, spec, write_file
from polyplan.formats.plan import DraftPolicy

REPORT_VERSION = 1


@dataclass(frozen=True)
class ForwardsPerToken:
    """φ_i / N of one model: measured, and predicted by the exact model and by Lemma 3.1."""

    measured: float
    exact: float
    paper: float


@dataclass(frozen=True)
class MeasuredExact:
    """Seconds per token, measured and as the exact model predicted them."""

    measured: float
    exact: float


@dataclass(frozen=True)
class TokensPerVerification:
    """Tokens one verification at a level produced: mean and standard deviation, and predicted."""

    mu: float
    sigma: float | None
    exact: float | None
    paper: float | None


@dataclass(frozen=True)
class AcceptedFraction:
    """Drafted tokens accepted over drafted tokens verified, measured and predicted, and the α used."""

    measured: float | None
    exact: float | None
    alpha: float


@dataclass(frozen=True)
class PassSeconds:
    """One model's seconds per forward pass inside the chain: measured, the plan's (its widths,
    switch costs included), and the profile's T at the widths and contexts the chain ran
    (None without the profile); tokens per pass measured."""

    measured: float
    exact: float
    profile: float | None
    mean_width: float


@dataclass(frozen=True)
class ReportLevel:
    """One model of a validated chain (M_1 first)."""

    model: str
    forwards_per_token: ForwardsPerToken
    seconds_per_token: MeasuredExact
    tokens_per_verification: TokensPerVerification | None  # None: the level verifies nothing
    accepted_fraction: AcceptedFraction | None
    tokens_drafted: int
    tokens_accepted: int
    seconds_per_pass: PassSeconds | None = None  # None: no pass timed


@dataclass(frozen=True)
class PredictedSpeedup:
    """A chain's predicted speedup: the exact model, Lemma 3.1, and the exact model on re-timed latency."""

    exact: float
    paper: float
    exact_retimed: float | None


@dataclass(frozen=True)
class SpeedupErrors:
    """Each prediction's error, predicted / measured − 1 (None for a lossy chain or no prediction)."""

    exact: float | None
    paper: float | None
    exact_retimed: float | None


@dataclass(frozen=True)
class MeasuredInterval:
    """The measured speedup's confidence interval and how it was made."""

    low: float
    high: float
    level: float
    method: str


@dataclass(frozen=True)
class ErrorSources:
    """Where a chain's prediction error comes from, each predicted / measured − 1, with
    (1 + latency)(1 + acceptance)(1 + residual) = 1 + total (docs/validation.md, "Where the
    prediction error comes from"); None where not measured (`acceptance`: greedy only);
    `tokens_per_pass` is level 1's, `noise` the measured CI's relative half-width."""

    total: float
    latency: float | None
    after_latency: float | None
    acceptance: float | None
    residual: float | None
    tokens_per_pass: float | None
    noise: float


@dataclass(frozen=True)
class CostSplit:
    """The exact model's error on a chain split into the factors of its time per token
    (`validation.cost_split`; docs/validation.md, "The error by the factors of time per token"),
    each predicted / measured − 1, their (1 + x) multiplying to 1 + total; `model` is the plan's
    speedup beyond b̂ / t̂ (0 for the exact model)."""

    total: float
    baseline: float
    forwards: float
    per_pass: float
    loop: float
    aggregation: float
    model: float


@dataclass(frozen=True)
class PromptRecord:
    """One prompt of one chain, summarised over repeats (medians), for per-category tables."""

    prompt: int
    tokens: int
    target_passes: float
    decode_s: float
    target_only_s: float
    speedup: float  # 1 / median over repeats of the paired time ratio


@dataclass(frozen=True)
class ReportChain:
    """One validated chain as report.json holds it."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    predicted_speedup: PredictedSpeedup
    exact_retimed_reaccepted: float | None  # the exact model on re-timed latency and validation acceptance
    measured_speedup: float | None  # None: lossy
    greedy_equal: bool | None  # None when sampling
    recommended: bool
    roles: tuple[str, ...]
    rank: int
    speedup_std: float | None
    speedup_per_repeat: tuple[float, ...] | None
    error: SpeedupErrors
    end_to_end_speedup: float | None
    tokens_per_second: float
    seconds_per_token: float
    loop_seconds_per_token: MeasuredExact
    first_difference: str | None
    levels: tuple[ReportLevel, ...]
    tokens_per_target_pass: float
    predicted_interval: tuple[float, float] | None
    measured_ci: MeasuredInterval | None
    inside_interval: bool | None
    prediction_holds: bool | None
    error_sources: ErrorSources | None
    per_prompt: tuple[PromptRecord, ...]
    near_tie: str | None = None  # why a chain that parted from target-only decoding is measured (validation.numerics)
    cost_split: CostSplit | None = None  # the error split by the factors of time per token (None: lossy, target-only)
    checked_speedup: float | None = None  # recommend's self-check: exact / C (None: the plan ran none)
    checked_interval: tuple[float, float] | None = None
    # the last level's draft lengths as the plan ran them (None: a fixed K, not written)
    draft_policy: DraftPolicy | None = spec(default=None, omit=NONE)


@dataclass(frozen=True)
class HeadlinePrediction:
    """The recommended chain's predicted speedup."""

    exact: float
    paper: float


@dataclass(frozen=True)
class OverTwoModel:
    """The recommended chain's speedup over the best two-model chain, over repeats."""

    mean: float
    std: float | None
    chain: str | None


@dataclass(frozen=True)
class SpeedupRatio:
    """How much faster one chain ran than another on the same bootstrap draws: point and CI."""

    point: float
    low: float
    high: float
    level: float

    @property
    def includes_one(self) -> bool:
        return self.low <= 1.0 <= self.high


@dataclass(frozen=True)
class ReportHeadline:
    """The recommended chain's result and how it compares."""

    line: str
    recommended: str
    measured_speedup: float | None
    speedup_std: float | None
    predicted_speedup: HeadlinePrediction
    over_two_model: OverTwoModel | None
    fastest: str | None
    fastest_speedup: float | None
    recommended_within_noise: bool | None
    fastest_over_recommended: SpeedupRatio | None


@dataclass(frozen=True)
class Check:
    """One check of a validation run (a fact about the run: does it hold?) or one diagnostic
    reported beside the checks, with its value, its threshold and whether it holds."""

    name: str
    value: float | None
    threshold: float
    passed: bool | None  # None when it cannot be decided (e.g. no lossless chain of that kind)
    detail: str


@dataclass(frozen=True)
class CategoryEntry:
    """One prompt category of one chain (None where a total was zero)."""

    category: str
    runs: int
    speedup: float | None
    tokens_per_target_pass: float | None


@dataclass(frozen=True)
class ChainCategoryRows:
    """The per-category rows of one chain."""

    chain: str
    rows: tuple[CategoryEntry, ...]


@dataclass(frozen=True)
class ReportSettings:
    """What the validation ran under."""

    sampling: str  # a `formats.sampling.SamplingMode` key
    prompts: int  # how many were decoded
    prompt_sources: tuple[str, ...]
    dropped_prompts: tuple[str, ...]  # too long for the context
    truncated_prompts: int  # shortened from the left to fit
    new_tokens: int
    repeats: int
    seed: int
    device: str  # where it ran now
    plan_device: str  # where the plan's profile was measured
    plan: str | None  # the plan.json validated
    wall_time_s: float
    exact_model: str = ""  # what the plan's exact predictions were computed with


@dataclass(frozen=True)
class ValidationReport:
    """Everything report.json holds (its `report_version` is the codec's)."""

    chains: tuple[ReportChain, ...]
    headline: ReportHeadline
    checks: tuple[Check, ...]
    categories: tuple[ChainCategoryRows, ...]
    settings: ReportSettings
    notes: tuple[str, ...]
    # the predictions' errors against the tolerance: information beside `checks`, not verdicts
    # (a report written before them has none, and reads and writes back without the key)
    diagnostics: tuple[Check, ...] = spec(default=(), omit=EMPTY)
    files: Mapping[str, str] = field(default_factory=dict)  # what the report wrote: name -> path


_REPORT = FileFormat(kind="report", record=ValidationReport, version_key="report_version", version=REPORT_VERSION,
                    migrations={}, advice="upgrade polyplan or re-run polyplan validate")


def encode_report(report: ValidationReport) -> dict[str, Any]:
    """The report.json object of `report` (its layout: docs/validation.md, "The report")."""
    return encode_file(_REPORT, report)


def decode_report(payload: Any, label: str = "report.json") -> ValidationReport:
    """The `ValidationReport` of a parsed report.json object (errors name `label` and the field)."""
    return decode_file(_REPORT, payload, label)


def read_report(path: str | os.PathLike[str]) -> ValidationReport:
    """Read and check report.json; `PolyplanError` naming the file and field on any problem."""
    return read_file(_REPORT, path)


def write_report(report: ValidationReport, path: str | os.PathLike[str]) -> None:
    """Write report.json atomically (temporary file in the same folder, then os.replace)."""
    write_file(_REPORT, report, path)
