"""Acceptance two ways: teacher-forced α against exact enumeration, decoded μ against theory.

Statistical tests here are z-tests at significance level 0.001 (|z| < 3.29) with the sample
sizes stated in each test; each has a negative control that the same test must reject.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from conftest import perturbed_copy, tiny_llama
from table_member import TableMember
from polyplan.decoder import HFMember, NGramMember
from polyplan.planner import capped_geometric_mean, capped_geometric_variance
from polyplan.profiler.acceptance import (
    cap_alpha,
    implied_mu,
    measure_decoded,
    pair_alpha,
    positional_mu,
    replay_counts,
    target_continuations,
    teacher_forced,
)
from polyplan.profiler.settings import AcceptanceSettings

pytestmark = pytest.mark.usefixtures("single_thread")

Z_CRITICAL = 3.29  # two-sided, significance level 0.001


def test_implied_mu_is_the_capped_geometric_mean():
    for alpha in (0.0, 0.3, 0.75, 0.99):
        for k in (1, 2, 5, 8):
            assert implied_mu(alpha, k) == pytest.approx(capped_geometric_mean(alpha, k), rel=1e-12)
    assert implied_mu(1.0, 4) == 5.0


def test_positional_mu_walks_the_rates_as_decoding_does():
    # Greedy 0/1 rates, K = 3: verifications accept 2, 3 (capped), 0, 0, 1 -> 3+4+1+1+2 tokens in 5.
    assert positional_mu([np.array([1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0], dtype=float)], 3) == pytest.approx(11 / 5)
    # A constant rate gives eq. 3 exactly (Wald: i.i.d. verifications, stopping at the end).
    for alpha, k in ((0.6, 3), (0.9, 5)):
        assert positional_mu([np.full(40, alpha), np.full(7, alpha)], k) == pytest.approx(implied_mu(alpha, k))
    # Mean rate 0.5 in two long runs: 2 verifications emit 10 tokens, then 10 emit 1 each, so
    # 20 tokens in 12 verifications, well below eq. 3's 1.94 at the same mean rate.
    bursty = [np.repeat([1.0, 0.0], 10)]
    assert positional_mu(bursty, 4) == pytest.approx(20 / 12)
    assert implied_mu(0.5, 4) == pytest.approx(1.9375)
    assert positional_mu([np.zeros(0)], 4) is None


def test_cap_alpha_keeps_profiles_valid():
    assert cap_alpha(1.0, 100) == pytest.approx(0.995)
    assert cap_alpha(0.7, 100) == 0.7


def _tables(vocab: int = 6, seed: int = 0) -> tuple[TableMember, TableMember]:
    generator = torch.Generator().manual_seed(seed)
    verifier = TableMember.random(vocab, 1, generator, name="q")
    return verifier, verifier.perturbed(1.0, generator, name="p")


def test_teacher_forced_alpha_equals_exact_enumeration():
    verifier, drafter = _tables()
    prompts = [[0, 3], [5], [1, 2, 4]]
    continuations = target_continuations(verifier, prompts, new_tokens=7, temperature=1.0, seed=3)
    assert [len(c) for c in continuations] == [7, 7, 7]
    for temperature in (1.0, 0.5):
        estimate = pair_alpha(
            teacher_forced(verifier, prompts, continuations, temperature=temperature, vocab=6),
            teacher_forced(drafter, prompts, continuations, temperature=temperature, vocab=6),
            resamples=50,
            rng=np.random.default_rng(0),
        )
        expected = []
        for prompt, continuation in zip(prompts, continuations):
            context = list(prompt)
            for token in continuation:
                q = torch.softmax(verifier.next_logits(context).double() / temperature, -1)
                p = torch.softmax(drafter.next_logits(context).double() / temperature, -1)
                expected.append(float(torch.minimum(p, q).sum()))
                context.append(token)
        assert np.concatenate(estimate.per_prompt) == pytest.approx(expected, abs=1e-6)
        assert estimate.raw_alpha == pytest.approx(np.mean(expected), abs=1e-6)
        assert estimate.samples == 21
        assert estimate.interval.low <= estimate.raw_alpha <= estimate.interval.high
        assert set(estimate.quantiles) == {"0.1", "0.25", "0.5", "0.75", "0.9"}


def test_greedy_alpha_is_argmax_agreement_and_ngram_works_as_drafter():
    verifier, drafter = _tables(seed=1)
    prompts = [[0, 1, 2, 0, 1]]
    continuations = target_continuations(verifier, prompts, new_tokens=6, temperature=0.0, seed=0)
    ngram = NGramMember(6, max_n=2)
    for other in (drafter, ngram):
        estimate = pair_alpha(
            teacher_forced(verifier, prompts, continuations, temperature=0.0, vocab=6),
            teacher_forced(other, prompts, continuations, temperature=0.0, vocab=6),
            resamples=20,
            rng=np.random.default_rng(0),
        )
        context, agree = list(prompts[0]), []
        for token in continuations[0]:
            other.reset()
            guess = int(other.forward(torch.tensor(context), keep_last=1).argmax())
            agree.append(float(guess == int(verifier.next_logits(context).argmax())))
            context.append(token)
        assert estimate.per_prompt[0].tolist() == agree


def test_decoded_mu_matches_theory_when_acceptance_is_iid():
    """Context-free members: every drafted token is accepted with the same probability α, so
    tokens per verification are exactly capped-geometric. 24 prompts x 60 tokens at K = 4
    give about 600 verifications."""
    generator = torch.Generator().manual_seed(5)
    q_row, p_row = torch.randn(6, generator=generator, dtype=torch.float64), torch.randn(6, generator=generator, dtype=torch.float64)
    verifier = TableMember(q_row.repeat(7, 1), name="q")  # order 1, every row the same
    drafter = TableMember(p_row.repeat(7, 1), name="p")
    alpha = float(torch.minimum(torch.softmax(q_row, 0), torch.softmax(p_row, 0)).sum())
    k = 4
    settings = AcceptanceSettings(new_tokens=60, seed=11, resamples=200, decoded_verifications=None)
    measured = measure_decoded(verifier, drafter, [[0]] * 24, k=k, temperature=1.0, settings=settings, rng=np.random.default_rng(0))
    n = measured.verifications
    assert n > 400
    standard_error = math.sqrt(capped_geometric_variance(alpha, k) / n)
    z = (measured.mu - capped_geometric_mean(alpha, k)) / standard_error
    assert abs(z) < Z_CRITICAL
    assert measured.sigma == pytest.approx(math.sqrt(capped_geometric_variance(alpha, k)), rel=0.15)
    assert measured.mu_interval.low <= measured.mu <= measured.mu_interval.high
    # Negative control: the μ of a rate 0.08 lower is rejected by the same test.
    wrong = (measured.mu - capped_geometric_mean(alpha - 0.08, k)) / standard_error
    assert abs(wrong) > Z_CRITICAL


def test_greedy_decoding_reproduces_the_teacher_forced_runs_exactly():
    """With the target as verifier and greedy decoding, the decoded run commits the target's
    greedy continuation, so its tokens per verification are the runs of argmax agreement in
    the teacher-forced pass (capped at K), the last verification of each prompt excepted (it
    drafts past the continuation)."""
    target = tiny_llama(0)
    drafter = perturbed_copy(target, 0.6, seed=2)
    verifier_member, drafter_member = HFMember(target, name="t"), HFMember(drafter, name="d")
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(4, 64, (10,), generator=generator).tolist() for _ in range(4)]
    new_tokens, k = 24, 3
    continuations = target_continuations(verifier_member, prompts, new_tokens=new_tokens, temperature=0.0, seed=0)
    agreement = pair_alpha(
        teacher_forced(verifier_member, prompts, continuations, temperature=0.0, vocab=64),
        teacher_forced(drafter_member, prompts, continuations, temperature=0.0, vocab=64),
        resamples=20,
        rng=np.random.default_rng(0),
    ).per_prompt
    settings = AcceptanceSettings(new_tokens=new_tokens, seed=0, resamples=20, decoded_verifications=None)
    decoded = measure_decoded(verifier_member, drafter_member, prompts, k=k, temperature=0.0, settings=settings,
                              rng=np.random.default_rng(0))
    runs_seen = set()
    for agree, counts in zip(agreement, decoded.per_prompt):
        expected, position = [], 0
        while position < new_tokens:
            run = 0
            while run < k and position + run < new_tokens and agree[position + run] == 1.0:
                run += 1
            expected.append(run + 1)
            position += run + 1
        assert list(counts[:-1]) == expected[: len(counts) - 1]
        runs_seen.update(counts)
        if agree[-1] == 0.0:  # the walk then never reads past the end: it is the decoded run
            assert positional_mu([agree], k) == pytest.approx(sum(expected) / len(expected))
    assert len(runs_seen) >= 2  # the pair is neither always right nor always wrong


def test_decoded_run_stops_taking_prompts_once_it_has_enough_verifications():
    verifier, drafter = _tables(seed=2)
    prompts = [[i % 6] for i in range(10)]
    every = AcceptanceSettings(new_tokens=12, seed=0, resamples=20, decoded_verifications=None)
    full = measure_decoded(verifier, drafter, prompts, k=2, temperature=1.0, settings=every, rng=np.random.default_rng(0))
    assert len(full.per_prompt) == 10
    enough = dataclasses.replace(every, decoded_verifications=20, decoded_min_prompts=3)
    short = measure_decoded(verifier, drafter, prompts, k=2, temperature=1.0, settings=enough, rng=np.random.default_rng(0))
    used = len(short.per_prompt)
    counts = [len(c) for c in full.per_prompt]
    assert used == next(i for i in range(3, 11) if sum(counts[:i]) >= 20)
    assert short.per_prompt == full.per_prompt[:used]  # the same runs, fewer of them
    assert short.verifications >= 20


def test_agreement_runs_keep_the_target_streams_and_old_runs_without_them_are_remeasured():
    from types import SimpleNamespace

    from polyplan.formats.profile import Profile, SamplingStats
    from polyplan.profiler.agreement_runs import ensure_agreement, measure_agreement

    verifier, drafter = _tables(seed=1)
    models = [SimpleNamespace(name="q", member=verifier, fingerprint="fq"), SimpleNamespace(name="p", member=drafter, fingerprint="fp")]
    prompts = [[0, 1, 2, 0, 1], [3, 4]]
    runs = measure_agreement(models, [("q", "p")], prompts, new_tokens=6, seed=0)
    continuations = target_continuations(verifier, prompts, new_tokens=6, temperature=0.0, seed=0)
    assert [(s.prompt_tokens, s.ids) for s in runs.streams] == [
        (len(p), tuple(p) + tuple(c)) for p, c in zip(prompts, continuations)
    ]
    profile = Profile(target="q", device="cpu", models=(), pairs=()).with_stats("q", "p", "greedy", SamplingStats(alpha=0.5))
    kept, measured = ensure_agreement(profile, runs, models, prompts, new_tokens=6, seed=0)
    assert not measured and kept.acceptance_runs["greedy"] is runs  # reused: nothing changed
    import dataclasses

    again, measured = ensure_agreement(profile, dataclasses.replace(runs, streams=()), models, prompts, new_tokens=6, seed=0)
    assert measured
    assert again.acceptance_runs["greedy"].streams == runs.streams  # measured again, now with the streams


def test_teacher_forcing_reads_in_short_passes_as_a_chain_runs_its_members():
    """A member whose numerics depend on the batch (dynamic int8's per-pass activation scale,
    modelled here by a bias that grows with the pass length) is read in passes of
    TEACHER_FORCING_WIDTH tokens: what a chain sees, not what one pass over the whole sequence
    gives (the negative control: width = the whole sequence)."""
    from polyplan.profiler.acceptance import TEACHER_FORCING_WIDTH

    class BatchDependent(TableMember):
        def forward(self, new_ids, keep_last=None):
            logits = super().forward(new_ids, keep_last)
            if len(new_ids) > TEACHER_FORCING_WIDTH:
                logits = logits.clone()
                logits[:, 0] += 100.0  # a long pass always says token 0
            return logits

    verifier, _ = _tables(seed=2)
    member = BatchDependent(verifier.table, name="batchy")
    prompts = [[1, 2, 3], [4]]
    continuations = target_continuations(verifier, prompts, new_tokens=12, temperature=0.0, seed=0)
    exact = teacher_forced(verifier, prompts, continuations, temperature=0.0, vocab=6).argmax
    short = teacher_forced(member, prompts, continuations, temperature=0.0, vocab=6).argmax
    whole = teacher_forced(member, prompts, continuations, temperature=0.0, vocab=6, width=64).argmax
    assert all(torch.equal(a, b) for a, b in zip(short, exact))
    assert all(bool((w == 0).all()) for w in whole) and not all(torch.equal(a, b) for a, b in zip(whole, exact))


def test_agreement_runs_keep_the_drafters_confidence_and_runs_without_it_are_remeasured():
    """The drafter's top probability at each position (softmax at temperature 1, to 1/255) comes
    from the same teacher-forced pass as the agreement, for pairs under the target; a profile
    whose runs lack it measures them again."""
    import dataclasses
    from types import SimpleNamespace

    from polyplan.formats.profile import Profile, SamplingStats
    from polyplan.profiler.agreement_runs import ensure_agreement, measure_agreement

    verifier, drafter = _tables(seed=1)
    models = [SimpleNamespace(name="q", member=verifier, fingerprint="fq"), SimpleNamespace(name="p", member=drafter, fingerprint="fp")]
    prompts = [[0, 1, 2, 0, 1], [3, 4]]
    runs = measure_agreement(models, [("q", "p")], prompts, new_tokens=6, seed=0)
    kept = runs.confidences_by_pair()[("q", "p")]
    continuations = target_continuations(verifier, prompts, new_tokens=6, temperature=0.0, seed=0)
    forced = teacher_forced(drafter, prompts, continuations, temperature=0.0, vocab=verifier.valid_vocab_size)
    for values, top in zip(kept, forced.top):
        assert len(values) == len(top) and max(abs(a - b) for a, b in zip(values, top.tolist())) <= 0.5 / 255 + 1e-12
    profile = Profile(target="q", device="cpu", models=(), pairs=()).with_stats("q", "p", "greedy", SamplingStats(alpha=0.5))
    bare = dataclasses.replace(runs, pairs=tuple(dataclasses.replace(pair, confidence=()) for pair in runs.pairs))
    again, measured = ensure_agreement(profile, bare, models, prompts, new_tokens=6, seed=0)
    assert measured and again.acceptance_runs["greedy"].confidences_by_pair() == runs.confidences_by_pair()


def test_agreement_runs_keep_the_drafters_10_best_confidence_and_older_runs_are_topped_up():
    """From the same teacher-forced logits, the drafter's top probability renormalised over its
    10 best (what llama-server's p_min compares) is kept beside the whole-vocabulary one: over a
    16-token vocabulary it is above it where the rest carries mass, never below; a profile from
    before it (confidences only) measures the runs again, and then has it."""
    import dataclasses
    from types import SimpleNamespace

    from polyplan.formats.profile import Profile, SamplingStats
    from polyplan.profiler.agreement_runs import ensure_agreement, measure_agreement

    verifier, drafter = _tables(vocab=16, seed=3)
    models = [SimpleNamespace(name="q", member=verifier, fingerprint="fq"), SimpleNamespace(name="p", member=drafter, fingerprint="fp")]
    prompts = [[0, 1, 2, 0, 1], [3, 4]]
    runs = measure_agreement(models, [("q", "p")], prompts, new_tokens=6, seed=0)
    whole, ten = runs.confidences_by_pair()[("q", "p")], runs.confidences_by_pair(top10=True)[("q", "p")]
    continuations = target_continuations(verifier, prompts, new_tokens=6, temperature=0.0, seed=0)
    forced = teacher_forced(drafter, prompts, continuations, temperature=0.0, vocab=16)
    for values, top in zip(ten, forced.top10):
        assert len(values) == len(top) and max(abs(a - b) for a, b in zip(values, top.tolist())) <= 0.5 / 255 + 1e-12
    pooled = [(w, t) for row_w, row_t in zip(whole, ten) for w, t in zip(row_w, row_t)]
    assert all(t >= w for w, t in pooled) and any(t > w for w, t in pooled)
    profile = Profile(target="q", device="cpu", models=(), pairs=()).with_stats("q", "p", "greedy", SamplingStats(alpha=0.5))
    kept, measured = ensure_agreement(profile, runs, models, prompts, new_tokens=6, seed=0)
    assert not measured and kept.acceptance_runs["greedy"] is runs  # both kept: reused
    older = dataclasses.replace(runs, pairs=tuple(dataclasses.replace(pair, confidence_top10=()) for pair in runs.pairs))
    again, measured = ensure_agreement(profile, older, models, prompts, new_tokens=6, seed=0)
    assert measured and again.acceptance_runs["greedy"].confidences_by_pair(top10=True) == runs.confidences_by_pair(top10=True)


def test_a_replayed_run_is_the_decoded_run_prompt_by_prompt():
    """Greedy, the target verifying: replaying the agreement along the target's continuation
    (`replay_counts`; the target's argmax is its continuation, `own_greedy_read`; past its end,
    where the last verification drafts there, the target's tokens read on from its cache and the
    drafter's argmax read on in its teacher-forced pass) gives exactly the decoded run's tokens
    per verification, for a model drafter and an n-gram drafter, at K = 1, 2 and 4; prompts end
    at the cut and at the target's EOS alike. float32 models on one thread whose argmax margins
    are wide (`tiny_llama`'s spread-out logits), so a pass's width does not flip an argmax."""
    from polyplan.decoder.member import stop_token_ids
    from polyplan.profiler.acceptance import decoded_measurement, own_greedy_read, replay_counts, target_continuations_past

    target = HFMember(tiny_llama(0), name="t")
    drafters = [HFMember(perturbed_copy(target.model, 0.6, seed=2), name="d"), NGramMember(64, max_n=3)]
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(4, 64, (24,), generator=generator).tolist() for _ in range(8)]
    new_tokens = 24
    settings = AcceptanceSettings(new_tokens=new_tokens, seed=0, resamples=50, decoded_verifications=None)
    streams = target_continuations_past(target, prompts, new_tokens=new_tokens, temperature=0.0, seed=0, past=3)
    continuations = [stream.continuation for stream in streams]
    assert continuations == list(target_continuations(target, prompts, new_tokens=new_tokens, temperature=0.0, seed=0))
    ended = [len(c) < new_tokens or c[-1] in stop_token_ids(target) for c in continuations]
    assert any(ended) and not all(ended)  # both ends are exercised
    forced_target = own_greedy_read(continuations)
    tails_read = 0
    for drafter in drafters:
        forced = teacher_forced(drafter, prompts, continuations, temperature=0.0, vocab=64, past=[s.past for s in streams])
        for k in (1, 2, 4):
            replayed = []
            for stream, t, d, guesses in zip(streams, forced_target.argmax, forced.argmax, forced.past_argmax):
                agree = (t == d).tolist()
                counts = replay_counts(agree, len(stream.continuation), k)
                if counts is None:
                    tails_read += 1
                    past = [int(g) == x for g, x in zip(guesses.tolist(), stream.past)]
                    counts = replay_counts(agree + past, len(stream.continuation), k)
                replayed.append(counts)
            decoded = measure_decoded(target, drafter, prompts, k=k, temperature=0.0, settings=settings, rng=np.random.default_rng(1))
            assert tuple(replayed) == decoded.per_prompt, (drafter.name, k)
            again = decoded_measurement(replayed, k=k, settings=settings, rng=np.random.default_rng(1), replayed=True)
            assert dataclasses.replace(again, replayed=False) == decoded
    assert tails_read > 0  # the last verification did draft past the continuation


def test_the_targets_tokens_past_its_continuation_are_its_greedy_tokens_eos_or_not():
    """`target_continuations_past` reads on from the cache the continuation left: the same tokens
    as a fresh greedy decode of prompt + continuation that ignores EOS; sampled, none."""
    from polyplan.decoder.chain import generate
    from polyplan.decoder.sampling import Sampling
    from polyplan.profiler.acceptance import target_continuations_past

    target = HFMember(tiny_llama(0), name="t")
    generator = torch.Generator().manual_seed(3)
    prompts = [torch.randint(4, 64, (n,), generator=generator).tolist() for n in (1, 5, 17)]
    for stream, prompt in zip(target_continuations_past(target, prompts, new_tokens=9, temperature=0.0, seed=0, past=4), prompts):
        fresh = generate([target], prompt + list(stream.continuation), max_new_tokens=4, sampling=Sampling(temperature=0.0))
        assert stream.past == tuple(fresh.token_ids) and len(stream.past) == 4
    sampled = target_continuations_past(target, prompts, new_tokens=9, temperature=1.0, seed=0, past=4)
    assert all(stream.past == () for stream in sampled)


def test_replay_counts_walks_runs_and_needs_the_tail_only_where_it_drafts_past_the_end():
    # K = 2 over 1 0 0 1 | 1: accept 1 (2 tokens), then 0 (1), then 1 + the tail's 1 (3 tokens).
    assert replay_counts([True, False, False, True, True], 4, 2) == (2, 1, 3)
    assert replay_counts([True, False, False, True], 4, 2) is None  # the tail is missing
    assert replay_counts([True, True, False, True, False], 4, 2) == (3, 2)  # a full accept's bonus covers position 2
    assert replay_counts([False, False, True], 3, 1) == (1, 1, 2)  # K = 1 reads no further than the end
    # Negative control: the same agreement at another K walks otherwise.
    assert replay_counts([True, False, False, True, True], 4, 1) == (2, 1, 2)


def test_a_decoded_run_stops_once_its_interval_holds_what_the_teacher_forced_pass_implies():
    """With `expected` inside the interval of the first `decoded_min_prompts` prompts the run
    stops there, confirmed; with an `expected` no interval holds (the negative control) it runs to
    the verifications rule and gives exactly the entry it gives without the check."""
    from polyplan.profiler.acceptance import decoded_measurement

    rng = np.random.default_rng(4)
    runs = [tuple(int(x) for x in rng.integers(1, 4, size=30)) for _ in range(12)]
    settings = AcceptanceSettings(new_tokens=60, seed=0, resamples=200, decoded_verifications=200, decoded_min_prompts=5)
    plain = decoded_measurement(runs, k=2, settings=settings, rng=np.random.default_rng(0))
    assert len(plain.per_prompt) == 7 and not plain.confirmed  # 7 x 30 >= 200
    agreeing = decoded_measurement(runs, k=2, settings=settings, rng=np.random.default_rng(0), expected=plain.mu)
    assert agreeing.confirmed and len(agreeing.per_prompt) == 5
    assert agreeing.mu_interval.low <= plain.mu <= agreeing.mu_interval.high  # it reports the interval it stopped on
    disagreeing = decoded_measurement(runs, k=2, settings=settings, rng=np.random.default_rng(0), expected=plain.mu + 0.8)
    assert disagreeing == plain


def test_the_targets_greedy_read_of_its_own_continuation_is_the_continuation():
    """Token j of a greedy continuation was the target's argmax at j, so `own_greedy_read` (no
    second read) gives what a teacher-forced read of the target gives; a continuation the target
    did not write (another model's) does not, the negative control."""
    from polyplan.profiler.acceptance import own_greedy_read

    target, other = HFMember(tiny_llama(0), name="t"), HFMember(perturbed_copy(tiny_llama(0), 0.6, seed=2), name="o")
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(4, 64, (n,), generator=generator).tolist() for n in (3, 9, 14)]
    own = target_continuations(target, prompts, new_tokens=20, temperature=0.0, seed=0)
    read = teacher_forced(target, prompts, own, temperature=0.0, vocab=64).argmax
    assert all(torch.equal(a, b) for a, b in zip(own_greedy_read(own).argmax, read))
    foreign = target_continuations(other, prompts, new_tokens=20, temperature=0.0, seed=0)
    read = teacher_forced(target, prompts, foreign, temperature=0.0, vocab=64).argmax
    assert not all(torch.equal(a, b) for a, b in zip(own_greedy_read(foreign).argmax, read))


def test_agreement_runs_do_not_read_the_target_a_second_time():
    """`measure_agreement` takes the target's argmaxes from its continuations: the target runs one
    forward pass per generated token (plus prefills) and no teacher-forced pass."""
    from types import SimpleNamespace

    from polyplan.profiler.agreement_runs import measure_agreement

    verifier, drafter = _tables(seed=1)
    widths = []

    class Counting(TableMember):
        def forward(self, new_ids, keep_last=None):
            widths.append(len(new_ids))
            return super().forward(new_ids, keep_last)

    counting = Counting(verifier.table, name="q")
    models = [SimpleNamespace(name="q", member=counting, fingerprint="fq"), SimpleNamespace(name="p", member=drafter, fingerprint="fp")]
    prompts = [[0, 1, 2, 0, 1], [3, 4]]
    target_continuations(counting, prompts, new_tokens=6, temperature=0.0, seed=0)
    generating, widths[:] = list(widths), []
    runs = measure_agreement(models, [("q", "p")], prompts, new_tokens=6, seed=0)
    assert widths == generating  # the continuations' passes and no teacher-forced read after them
    assert runs.pairs[0].agreement == measure_agreement(
        [SimpleNamespace(name="q", member=verifier, fingerprint="fq"), models[1]], [("q", "p")], prompts, new_tokens=6, seed=0
    ).pairs[0].agreement
