"""Acceptance runs: the run-length law measured from agreement sequences, and the exact model fed
with it. Sequences are generated with a seeded numpy Generator; tolerances state the sample size."""

from __future__ import annotations

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.formats.profile import Profile
from polyplan.formats.profile import decode_profile
from polyplan.planner.exact.runs import profile_runs, run_survival


def _markov(rng: np.random.Generator, length: int, stay_accept: float, leave_reject: float) -> tuple[bool, ...]:
    """Agreements with memory: after an agreement agree again w.p. stay_accept, after a miss w.p. leave_reject."""
    state, out = True, []
    for u in rng.random(length):
        state = bool(u < (stay_accept if state else leave_reject))
        out.append(state)
    return tuple(out)


def _walk_mu(sequences, k: int) -> float:
    """Tokens per verification of greedy n = 2 decoding at block size k, walked literally."""
    counts = []
    for sequence in sequences:
        position = 0
        while position < len(sequence):
            run = 0
            while position + run < len(sequence) and sequence[position + run]:
                run += 1
            if position + run == len(sequence) and run < k:
                break
            counts.append(min(run, k) + 1)
            position += min(run, k) + 1
    return float(np.mean(counts))


def test_independent_agreements_give_the_geometric_law():
    # 20 000 Bernoulli(0.7) positions: S(j) within 0.02 of 0.7^j for j <= 4 (sd of S(1) ~ 0.005).
    rng = np.random.default_rng(1)
    sequences = tuple(tuple(bool(x) for x in rng.random(4000) < 0.7) for _ in range(5))
    for k in (1, 4):
        survival = run_survival(sequences, k)
        assert np.allclose(survival(4), 0.7 ** np.arange(5), atol=0.02)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_exact_model_with_runs_reproduces_the_decoding_walk_and_iid_does_not(k):
    rng = np.random.default_rng(2)
    sequences = tuple(_markov(rng, 3000, stay_accept=0.9, leave_reject=0.2) for _ in range(4))
    alpha = float(np.mean([x for s in sequences for x in s]))
    walked = _walk_mu(sequences, k)
    with_runs = predict_chain([run_survival(sequences, k)], [0.01, 0.001], [k]).tokens_per_verification[0]
    # The product-limit estimate over the walk's own starts is their empirical law (only the last
    # run of each sequence is censored), so the prediction matches the walk to within 0.5%.
    assert with_runs == pytest.approx(walked, rel=5e-3)
    iid = predict_chain([alpha], [0.01, 0.001], [k]).tokens_per_verification[0]
    if k > 1:  # negative control: the i.i.d. reading of the same data misses by more than 10%
        assert abs(iid / walked - 1) > 0.10


def _with_runs(runs: dict, version: int) -> Profile:
    """A profile holding agreement runs: in version 2's field, or in version 1's meta."""
    payload = {"schema_version": version, "target": "t", "device": "cpu", "pairs": [],
               "models": [{"name": name, "fingerprint": f"fp-{name}", "latency": [{"context_length": 8, "k": 1, "median_s": 0.01}]}
                          for name in ("t", "d")]}
    payload.update({"acceptance_runs": runs} if version == 2 else {"meta": {"acceptance_runs": runs}})
    return decode_profile(payload)


@pytest.mark.parametrize("version, where", [(2, "acceptance_runs"), (1, "meta.acceptance_runs")])
def test_profile_runs_reads_pairs_and_rejects_malformed_strings(version, where):
    runs = {"greedy": {"pairs": [{"verifier": "t", "drafter": "d", "agreement": ["1101", "0"]}]}}
    profile = _with_runs(runs, version)
    assert profile_runs(profile, "greedy") == {("t", "d"): ((True, True, False, True), (False,))}
    assert profile_runs(profile, "t1.0") == {}
    runs["greedy"]["pairs"][0]["agreement"] = ["1x"]
    with pytest.raises(PolyplanError, match=rf"{where}.greedy.pairs\[0\].agreement: strings of 0 and 1 only"):
        _with_runs(runs, version)
    runs["greedy"]["pairs"][0] = {"verifier": "t"}
    with pytest.raises(PolyplanError, match=rf"{where}.greedy.pairs\[0\].drafter: missing"):
        _with_runs(runs, version)
    with pytest.raises(PolyplanError, match="no complete verification"):
        run_survival(((True, True),), 4)
