"""Acceptance runs: how many drafted tokens in a row a verifier accepts, from measured sequences.

Real acceptance is bursty (an n-gram drafter copying a repeated block is right many times in a
row, then wrong many times), so the i.i.d. reading, P(at least j accepted) = α^j, can be far off.
Under greedy decoding the sequence of agreements along a target continuation is measured
(`profiler.agreement_runs`), and speculative decoding of the pair at block size K walks it
deterministically: a verification starting at position s accepts the r consecutive agreements
from s, up to K, and the next one starts at s + min(r, K) + 1.

`run_survival` walks every sequence that way and estimates, over the verification starts it
visits, S(j) = P(at least j consecutive agreements from a start), as a product of per-step
continuation rates (a run cut off by the end of a sequence counts only as far as it was
observed; beyond the longest run S continues at the last rate). The cost model reads
P(min(A, m) = a) = S(a) − S(a + 1) (a < m) and S(m); rounds stay independent of each other.
The sequences are the profile's `acceptance_runs[sampling]` (`formats.profile.AgreementRuns`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import PairAgreement, Profile


@dataclass(frozen=True)
class RunSurvival:
    """S(j) = P(a verification accepts at least j drafted tokens), j = 0 … len(values) − 1."""

    values: tuple[float, ...]
    tail: float  # the continuation rate beyond the last value
    starts: int  # the verification starts the estimate is over (its sample size)

    def __call__(self, max_j: int) -> np.ndarray:
        """S(0 … max_j) as float64 (length max_j + 1)."""
        known = np.asarray(self.values[: max_j + 1], dtype=float)
        if len(known) > max_j:
            return known
        extra = known[-1] * self.tail ** np.arange(1, max_j + 2 - len(known))
        return np.concatenate([known, extra])


@dataclass(frozen=True)
class RunCounts:
    """What one agreement sequence contributes to `run_survival` at one block size:
    at_risk[j] starts seen with a run of at least j whose continuation past j is known,
    going_on[j] of those whose run reached j + 1, and the number of verification starts. Counts
    add over sequences, so the bootstrap resamples prompts with a matrix product."""

    at_risk: tuple[int, ...]
    going_on: tuple[int, ...]
    starts: int


def run_counts(sequence: tuple[bool, ...], block: int) -> RunCounts:
    """Walk one agreement sequence as decoding at block size `block` does (module docstring)."""
    if block < 1:
        raise PolyplanError(f"block size must be >= 1, got {block}")
    at_risk: list[int] = []
    going_on: list[int] = []
    starts = 0
    length, position = len(sequence), 0
    while position < length:
        run = 0
        while position + run < length and sequence[position + run]:
            run += 1
        censored = position + run == length  # still agreeing where the measurement ends
        if censored and run < block:
            break  # this verification would reach past the measured sequence
        starts += 1
        while len(at_risk) <= run:
            at_risk.append(0)
            going_on.append(0)
        for j in range(run):
            at_risk[j] += 1
            going_on[j] += 1
        if not censored:
            at_risk[run] += 1  # seen to end at `run`
        position += min(run, block) + 1
    return RunCounts(tuple(at_risk), tuple(going_on), starts)


def survival_from_counts(at_risk: np.ndarray, going_on: np.ndarray, starts: int) -> RunSurvival:
    """The product-limit survival from pooled counts (arrays indexed by run length j)."""
    if starts == 0:
        raise PolyplanError("acceptance runs: no complete verification in the measured sequences")
    values, rate = [1.0], 0.0
    for j in range(len(at_risk)):
        if at_risk[j] == 0:
            break
        rate = going_on[j] / at_risk[j]
        values.append(values[-1] * rate)
    return RunSurvival(tuple(float(v) for v in values), float(min(rate, 1.0 - 1e-9)), int(starts))


def count_matrix(sequences: tuple[tuple[bool, ...], ...], block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sequence (rows), its `run_counts` padded to a common length: (at_risk, going_on, starts)."""
    counts = [run_counts(sequence, block) for sequence in sequences]
    width = max((len(c.at_risk) for c in counts), default=0)
    at_risk = np.zeros((len(counts), width))
    going_on = np.zeros((len(counts), width))
    for row, c in enumerate(counts):
        at_risk[row, : len(c.at_risk)] = c.at_risk
        going_on[row, : len(c.going_on)] = c.going_on
    return at_risk, going_on, np.asarray([c.starts for c in counts], dtype=float)


def run_survival(sequences: tuple[tuple[bool, ...], ...], block: int) -> RunSurvival:
    """Walk each agreement sequence as decoding at block size `block` does (module docstring)
    and estimate the survival of the run from each verification start."""
    if block < 1:
        raise PolyplanError(f"block size must be >= 1, got {block}")
    at_risk, going_on, starts = count_matrix(sequences, block)
    return survival_from_counts(at_risk.sum(axis=0), going_on.sum(axis=0), int(starts.sum()))


def with_agreement_alphas(profile: Profile, pairs) -> Profile:
    """`profile` with each of `pairs`' (`PairAgreement`s) greedy α its agreement rate (what the
    i.i.d. reading uses when the acceptance was measured on other prompts); pairs the profile
    does not have, or that have no greedy statistics or no agreement, are left alone."""
    for entry in pairs:
        pair = profile.pair(entry.verifier, entry.drafter)
        text = "".join(entry.agreement)
        if pair is not None and "greedy" in pair.sampling and text:
            stats = dataclasses.replace(pair.sampling["greedy"], alpha=min(text.count("1") / len(text), 1.0 - 1e-6))
            profile = profile.with_stats(entry.verifier, entry.drafter, "greedy", stats)
    return profile


def on_prompts(profile: Profile, indices) -> Profile:
    """`profile` as if only the prompts at `indices` had been profiled: their greedy agreement runs,
    confidences and target streams, and each pair's α their agreement rate (a profiling/new split
    in `planner.intervals.interval_coverage`, one check prompt in `validation.check_prices`)."""
    runs = profile.acceptance_runs["greedy"]
    picked = [int(i) for i in indices]
    entries = tuple(PairAgreement(entry.verifier, entry.drafter, tuple(entry.agreement[i] for i in picked),
                                  tuple(entry.confidence[i] for i in picked) if entry.confidence else (),
                                  tuple(entry.confidence_top10[i] for i in picked) if entry.confidence_top10 else ())
                    for entry in runs.pairs)
    streams = tuple(runs.streams[i] for i in picked) if len(runs.streams) == len(runs.pairs[0].agreement) else ()
    part = dataclasses.replace(profile, acceptance_runs={
        **profile.acceptance_runs, "greedy": dataclasses.replace(runs, pairs=entries, prompts=len(picked), streams=streams),
    })
    return with_agreement_alphas(part, entries)


def at_length(profile: Profile, new_tokens: int) -> Profile:
    """`profile` with its acceptance read over the first `new_tokens` positions of each profiled
    continuation: the agreement sequences, the drafters' confidences and the target's streams
    cut there, and each greedy α its agreement rate over them (`with_agreement_alphas`), since
    acceptance changes along an answer (docs/cost-model.md, "The answer length"). Runs measured
    over no more than `new_tokens` are kept as they are."""
    if new_tokens < 1:
        raise PolyplanError(f"new_tokens: must be an integer >= 1, got {new_tokens!r}")
    runs = {}
    for mode, entry in profile.acceptance_runs.items():
        if entry.new_tokens is not None and entry.new_tokens <= new_tokens:
            runs[mode] = entry
            continue
        pairs = tuple(dataclasses.replace(pair, agreement=tuple(text[:new_tokens] for text in pair.agreement),
                                          confidence=tuple(text[:2 * new_tokens] for text in pair.confidence),
                                          confidence_top10=tuple(text[:2 * new_tokens] for text in pair.confidence_top10))
                      for pair in entry.pairs)
        streams = tuple(dataclasses.replace(stream, ids=stream.ids[:stream.prompt_tokens + new_tokens]) for stream in entry.streams)
        runs[mode] = dataclasses.replace(entry, pairs=pairs, streams=streams, new_tokens=new_tokens)
    cut = dataclasses.replace(profile, acceptance_runs=runs)
    return with_agreement_alphas(cut, runs["greedy"].pairs) if "greedy" in runs else cut


def profile_runs(profile: Profile, sampling: str) -> dict[tuple[str, str], tuple[tuple[bool, ...], ...]]:
    """The agreement sequences `profile` records for `sampling`, by (verifier, drafter)."""
    entry = profile.acceptance_runs.get(sampling)
    return {} if entry is None else entry.by_pair()
