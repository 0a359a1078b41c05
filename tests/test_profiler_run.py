"""The resumable profiling run: a complete profile, resume after interruption, reuse, bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import perturbed_copy, target_early_ngram
from polyplan.decoder import HFMember, NGramMember
from polyplan.formats.errors import PolyplanError
from polyplan.planner.search import SearchSettings, rank_chains
from polyplan.formats.profile import LoopCalibration, read_profile, write_profile
from polyplan.profiler import (
    AcceptanceSettings,
    LatencySettings,
    ProfiledModel,
    ProfileSettings,
    fingerprint_module,
    profile_models,
)
from polyplan.profiler.acceptance import target_continuations
from polyplan.profiler.prompts import EncodedPrompt, Prompt

VOCAB = 64


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def models(single_thread) -> list[ProfiledModel]:
    """A target, its 1-of-4-layer early exit and an n-gram drafter: costs far enough apart
    that the measured order (hence the pair set) does not depend on timing noise."""
    return target_early_ngram()


def _prompts(count: int = 4, length: int = 24, seed: int = 0) -> list[EncodedPrompt]:
    generator = torch.Generator().manual_seed(seed)
    return [
        EncodedPrompt(Prompt("", "user", f"prompts.txt:{i + 1}"), tuple(torch.randint(4, VOCAB, (length,), generator=generator).tolist()))
        for i in range(count)
    ]


SETTINGS = ProfileSettings(
    latency=LatencySettings(ks=(1, 2, 4), context_lengths=(8, 24), repeats=3, warmup=1, prefill_repeats=2, noise_budget_s=0.0),
    acceptance=AcceptanceSettings(block_sizes=(2, 3), new_tokens=10, decoded_prompts=2, resamples=100),
)
ENTRIES = 3 + 3 * 2 * 3  # latency of 3 models; 3 pairs x 2 modes x (alpha + decoded at 2 K)


class Counter:
    """Records the run's progress; raises `Interrupt` once `stop_after` entries are measured."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.totals: list[int] = []
        self.started: list[str] = []
        self.measured: list[str] = []
        self.reused: list[str] = []

    def total(self, steps: int) -> None:
        self.totals.append(steps)

    def start(self, step) -> None:
        self.started.append(step.label)

    def done(self, step, reused: bool) -> None:
        (self.reused if reused else self.measured).append(step.label)
        if self.stop_after is not None and len(self.measured) == self.stop_after:
            raise Interrupt


class Interrupt(Exception):
    """Stands in for Ctrl-C / a kill between two measurements."""


def _entries(profile) -> dict[str, object]:
    """Every acceptance entry of a profile (the deterministic part), by a readable key."""
    found = {}
    for pair in profile.pairs:
        for mode, stats in pair.sampling.items():
            found[f"alpha {pair.verifier}<-{pair.drafter} {mode}"] = (stats.alpha, stats.alpha_ci, stats.fingerprint)
            for decoded in stats.decoded:
                found[f"decoded {pair.verifier}<-{pair.drafter} {mode} {decoded.k}"] = (decoded.mu, decoded.sigma, decoded.mu_ci)
    return found


@pytest.fixture(scope="module")
def complete(single_thread, models, tmp_path_factory) -> tuple[Path, Counter]:
    """One uninterrupted run: the reference for the other tests."""
    out = tmp_path_factory.mktemp("complete") / "profile.json"
    counter = Counter()
    profile_models(models, _prompts(), out, SETTINGS, progress=counter)
    return out, counter


def test_complete_run_writes_a_profile_that_recommend_accepts(complete, models):
    out, counter = complete
    # α is measured at every position of the target's continuations: 10 tokens per prompt, or
    # fewer where the target emits its EOS id (the tiny random target does on some prompts)
    positions = {
        key: sum(len(c) for c in target_continuations(models[0].member, [p.ids for p in _prompts()], new_tokens=10,
                                                     temperature=temperature, seed=SETTINGS.acceptance.seed))
        for key, temperature in (("greedy", 0.0), ("t1.0", 1.0))
    }
    assert all(0 < count <= 4 * 10 for count in positions.values())
    assert positions["greedy"] < 4 * 10  # this target does stop early on some prompts (the EOS path is exercised)
    profile = read_profile(out)
    assert profile.target == "target"
    assert profile.model_names() == ["target", "early", "ngram"]
    assert len(counter.measured) == ENTRIES and counter.reused == []
    assert counter.totals == [ENTRIES, ENTRIES]
    assert [(p.verifier, p.drafter) for p in profile.pairs] == [("target", "early"), ("target", "ngram"), ("early", "ngram")]
    for model in profile.models:
        assert {(p.context_length, p.k) for p in model.latency} == {(c, k) for c in (8, 24) for k in (1, 2, 4)}
        assert [p.context_length for p in model.prefill] == [8, 24]
        assert model.latency_fingerprint and all(p.repeats == 3 for p in model.latency)
    step = {m.name: min(p.median_s for p in m.latency if p.k == 1) for m in profile.models}
    for pair in profile.pairs:
        assert set(pair.sampling) == {"greedy", "t1.0"}
        for key, stats in pair.sampling.items():
            assert [d.k for d in stats.decoded] == [2, 3]
            # 4 prompts (2 decoded) are too few for a bootstrap interval (planner.intervals.sample_size):
            # none is recorded, and the entry says why.
            assert stats.alpha_samples == positions[key] and stats.alpha_ci is None
            assert "alpha from 4 prompt(s): no interval (needs >= 5 prompts)" in stats.warnings
            assert {i.k for i in stats.implied} >= {1, 2, 3, 8}
            for decoded in stats.decoded:
                assert decoded.prompts == 2 and decoded.mu_ci is None and decoded.sigma_ci is None
                assert f"K={decoded.k}: decoded mu from 2 prompt(s): no interval (needs >= 5 prompts)" in stats.warnings
    assert step["ngram"] < step["early"] < step["target"]
    plan = rank_chains(profile, SearchSettings(sampling="greedy"))
    assert plan.best.chain[0] == "target"
    assert rank_chains(profile, SearchSettings(sampling="t1.0")).ranked


def test_interrupted_run_resumes_without_remeasuring(models, tmp_path):
    out = tmp_path / "profile.json"
    first = Counter(stop_after=5)  # 3 latency entries, then 2 alpha entries
    with pytest.raises(Interrupt):
        profile_models(models, _prompts(), out, SETTINGS, progress=first)
    saved = read_profile(out)
    assert len(saved.models) == 3 and sum(len(p.sampling) for p in saved.pairs) == 2

    # The reference: the same latency entries, everything else measured without interruption.
    reference = tmp_path / "reference.json"
    write_profile(dataclasses.replace(saved, pairs=()), reference)
    profile_models(models, _prompts(), reference, SETTINGS)

    interrupted_seconds = saved.profiler.seconds
    assert interrupted_seconds is not None and interrupted_seconds > 0  # measuring time is kept as it is spent
    second = Counter()
    profile_models(models, _prompts(), out, SETTINGS, progress=second)
    assert sorted(second.reused) == sorted(first.measured)  # nothing measured twice
    # the resumed profile's measuring time adds this run's to the interrupted one's (the self-check's budget)
    assert read_profile(out).profiler.seconds > interrupted_seconds
    assert len(second.measured) == ENTRIES - 5
    assert not set(second.started) & set(first.measured)
    # Acceptance entries are deterministic: resuming gives exactly the uninterrupted numbers.
    assert _entries(read_profile(out)) == _entries(read_profile(reference))

    third = Counter()
    profile_models(models, _prompts(), out, SETTINGS, progress=third)
    assert third.measured == [] and len(third.reused) == ENTRIES


def test_interrupt_during_decoded_phase_keeps_a_usable_profile(models, tmp_path):
    out = tmp_path / "profile.json"
    with pytest.raises(Interrupt):
        profile_models(models, _prompts(), out, SETTINGS, progress=Counter(stop_after=3 + 6 + 1))
    profile = read_profile(out)
    assert sum(len(s.decoded) for p in profile.pairs for s in p.sampling.values()) == 1
    assert rank_chains(profile).best.chain[0] == "target"


def test_changed_settings_and_models_remeasure_only_what_they_affect(models, complete, tmp_path):
    out = tmp_path / "profile.json"
    out.write_text(complete[0].read_text())
    more_blocks = ProfileSettings(SETTINGS.latency, AcceptanceSettings(block_sizes=(2, 3, 4), new_tokens=10, decoded_prompts=2, resamples=100))
    counter = Counter()
    profile_models(models, _prompts(), out, more_blocks, progress=counter)
    assert counter.measured and all(label.startswith("decoded") and label.endswith("K=4") for label in counter.measured)
    assert len(counter.measured) == 3 * 2

    retrained = perturbed_copy(models[1].member.model, 0.5, seed=7)
    changed = models[:1] + [ProfiledModel("early", HFMember(retrained, name="early"), fingerprint_module(retrained))] + models[2:]
    counter = Counter()
    profile_models(changed, _prompts(), out, more_blocks, progress=counter)
    assert "latency early" in counter.measured
    assert all("early" in label for label in counter.measured)
    assert not any(label.startswith("latency") and "early" not in label for label in counter.measured)


def test_fewer_block_sizes_keep_the_valid_entries_only(models, complete, tmp_path):
    out = tmp_path / "profile.json"
    out.write_text(complete[0].read_text())
    fewer = ProfileSettings(SETTINGS.latency, AcceptanceSettings(block_sizes=(2,), new_tokens=10, decoded_prompts=2, resamples=100))
    counter = Counter()
    profile_models(models, _prompts(), out, fewer, progress=counter)
    assert counter.measured == []
    # K = 3 was measured with the same models and settings: it stays (its fingerprint matches).
    assert all([d.k for d in s.decoded] == [2, 3] for p in read_profile(out).pairs for s in p.sampling.values())


def test_existing_profile_of_another_schema_version_is_refused_and_kept(models, complete, tmp_path):
    out = tmp_path / "profile.json"
    payload = json.loads(complete[0].read_text())
    payload["schema_version"] = 3
    out.write_text(json.dumps(payload))
    before = out.read_text()
    with pytest.raises(PolyplanError, match=r"--out: .*profile.json holds a profile of another schema version"):
        profile_models(models, _prompts(), out, SETTINGS)
    assert out.read_text() == before


def test_unwritable_out_is_named_before_measuring(models, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    counter = Counter()
    with pytest.raises(PolyplanError, match=r"^--out: cannot write .*file/profile.json \(folder .* does not exist\)$"):
        profile_models(models, _prompts(), blocker / "profile.json", SETTINGS, progress=counter)
    assert counter.started == []
    with pytest.raises(PolyplanError, match=r"^--out: .* is a folder"):
        profile_models(models, _prompts(), tmp_path, SETTINGS)


def test_prompt_longer_than_a_context_is_named(models, tmp_path):
    long = [EncodedPrompt(Prompt("", "user", "mine.jsonl:3"), tuple([5] * 300))]
    with pytest.raises(PolyplanError, match=r"^mine.jsonl:3: prompt of 300 tokens is longer than the context of 'target' \(256 tokens\)$"):
        profile_models(models, long, tmp_path / "p.json", SETTINGS)
    almost = [EncodedPrompt(Prompt("", "user", "mine.jsonl:4"), tuple([5] * 250))]
    with pytest.raises(PolyplanError, match=r"^mine.jsonl:4: prompt of 250 tokens \+ 13 generated/drafted tokens does not fit"):
        profile_models(models, almost, tmp_path / "p.json", SETTINGS)
    assert not (tmp_path / "p.json").exists()


def test_models_that_cannot_share_a_chain_are_named(models, tmp_path):
    with pytest.raises(PolyplanError, match=r"^candidates: duplicate name 'target'$"):
        profile_models(models + models[:1], _prompts(), tmp_path / "p.json", SETTINGS)
    wide = NGramMember(VOCAB + 8, name="wide")
    with pytest.raises(PolyplanError, match=r"^candidate 'wide': vocabulary of 72 tokens differs from the target 'target' \(64\)$"):
        profile_models(models + [ProfiledModel("wide", wide, "w")], _prompts(), tmp_path / "p.json", SETTINGS)


def test_meta_added_by_other_tools_survives_a_rerun(models, complete, tmp_path):
    """What other steps measured (the loop overhead) and the user's free-form meta survive a
    rerun of the profiler; only its own record is replaced."""
    out = tmp_path / "profile.json"
    profile = dataclasses.replace(read_profile(complete[0]), loop_overhead={"greedy": LoopCalibration(per_step_s=0.0001, per_round_s=0.0)},
                                  meta={"note": {"who": "me"}})
    write_profile(profile, out)
    profile_models(models, _prompts(), out, SETTINGS)
    again = read_profile(out)
    assert again.loop_overhead == {"greedy": LoopCalibration(per_step_s=0.0001, per_round_s=0.0)}
    assert again.meta == {"note": {"who": "me"}}
    assert again.profiler.acceptance["block_sizes"] == [2, 3]


def test_a_profile_without_the_engine_rate_gets_it_on_a_rerun_and_nothing_else(models, complete, tmp_path):
    out = tmp_path / "profile.json"
    payload = json.loads(complete[0].read_text())
    for pair in payload["pairs"]:
        for stats in pair["sampling"].values():
            stats.pop("engine_alpha"), stats.pop("engine_alpha_ci")  # as an older polyplan wrote it
    out.write_text(json.dumps(payload))
    counter = Counter()
    profile_models(models, _prompts(), out, SETTINGS, progress=counter)
    assert counter.measured and all(label.startswith("alpha") for label in counter.measured)  # decoded entries kept
    assert len(counter.measured) == 3 * 2
    rerun, reference = read_profile(out), read_profile(complete[0])
    assert _entries(rerun) == _entries(reference)
    for pair in rerun.pairs:
        for mode, stats in pair.sampling.items():
            assert stats.engine_alpha == reference.stats(pair.verifier, pair.drafter, mode).engine_alpha
            if mode == "greedy" or pair.drafter == "ngram":
                assert stats.engine_alpha == stats.alpha  # q or p one-hot: the rules agree


def test_an_ngram_simple_drafter_is_marked_and_no_ngram_member_verifies(models, tmp_path):
    """Two weightless drafters: each is measured under the models, never one under the other
    (an n-gram member has no distribution to verify with), and the ngram-simple one is marked
    with its size_n so the planner replays it."""
    from polyplan.decoder.ngram_simple import NGramSimpleMember

    simple = ProfiledModel("simple", NGramSimpleMember(models[0].member.vocab_size, size_n=2, name="simple"), "fp-simple")
    out = tmp_path / "p.json"
    profile_models(models + [simple], _prompts(), out, SETTINGS)
    profile = read_profile(out)
    pairs = {(p.verifier, p.drafter) for p in profile.pairs}
    assert {("target", "simple"), ("early", "simple"), ("target", "ngram")} <= pairs
    assert not pairs & {("ngram", "simple"), ("simple", "ngram")}
    assert profile.model("simple").ngram_simple == 2 and profile.model("ngram").ngram_simple is None


def _with_simple(models) -> list:
    from polyplan.decoder.ngram_simple import NGramSimpleMember

    return models + [ProfiledModel("simple", NGramSimpleMember(models[0].member.vocab_size, size_n=2, name="simple"), "fp-simple")]


def test_a_rule_drafter_under_the_target_is_replayed_round_for_round_as_decoding_runs(models, tmp_path, monkeypatch):
    """At greedy, the target over ngram-simple is not decoded: the rule's rounds are replayed on
    the target's greedy continuations (what the planner reads). The replay gives the real run's
    tokens per verification round for round (the last round of a prompt may differ: the replay
    cuts a draft at the continuation's end, the run counts tokens past it)."""
    import polyplan.profiler.run as run
    from polyplan.profiler.acceptance import measure_decoded

    candidates = _with_simple(models)
    real, decoded = run.measure_decoded, []
    monkeypatch.setattr(run, "measure_decoded", lambda verifier, drafter, *a, **kw: decoded.append((verifier.name, drafter.name))
                        or real(verifier, drafter, *a, **kw))
    acceptance = dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,))
    settings = ProfileSettings(SETTINGS.latency, acceptance)
    outcome = profile_models(candidates, _prompts(4), tmp_path / "p.json", settings)
    assert ("target", "simple") not in decoded and ("early", "simple") in decoded  # under another model: decoded
    entries = outcome.profile.stats("target", "simple", "greedy").decoded
    assert [entry.k for entry in entries] == [2, 3] and all(entry.replayed for entry in entries)
    prompts = [prompt.ids for prompt in _prompts(4)][:acceptance.decoded_prompts]
    replay = _replay_counts(candidates, settings, tmp_path)
    for entry in entries:
        measured = measure_decoded(candidates[0].member, candidates[3].member, prompts, k=entry.k, temperature=0.0,
                                   settings=acceptance, rng=np.random.default_rng(0))
        replayed = replay(entry.k)
        assert len(replayed) == len(measured.per_prompt) == len(prompts)
        for real_counts, replay_counts in zip(measured.per_prompt, replayed):
            assert len(replay_counts) == len(real_counts) and replay_counts[:-1] == real_counts[:-1]
        assert entry.mu == pytest.approx(float(np.mean([c for counts in replayed for c in counts])))


def _replay_counts(candidates, settings, tmp_path):
    """The rule replay's per-prompt counts at block size k, from a run's state (`_Run._rule_runs`)."""
    from polyplan.profiler.run import _Run

    state = _Run(candidates, _prompts(4), tmp_path / "state.json", settings, "cpu", None, None)
    return lambda k: list(state._rule_runs("simple", k))


@pytest.mark.parametrize("planning", [True, False])
def test_a_plan_leaves_out_the_decoded_runs_of_a_rule_drafter_under_another_model(models, tmp_path, planning):
    """No ranked chain puts ngram-simple under another model than the target, so a plan's
    measuring (`decoded_until_confirmed`) decodes no such pair and says so; `polyplan profile`
    (the control) still decodes it."""
    acceptance = dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,), decoded_until_confirmed=planning)
    counter = Counter()
    outcome = profile_models(_with_simple(models), _prompts(4), tmp_path / "p.json", ProfileSettings(SETTINGS.latency, acceptance),
                             progress=counter)
    kept = [entry.k for entry in outcome.profile.stats("early", "simple", "greedy").decoded]
    left = [label for label in counter.reused if label.startswith("decoded early <- simple") and "drafts by rule" in label]
    assert (kept, len(left)) == (([], 2) if planning else ([2, 3], 0))
    assert outcome.profile.stats("early", "simple", "greedy").alpha is not None  # α is still read (it costs nothing more)


def test_the_agreement_runs_reuse_the_runs_greedy_reads_and_equal_those_measured_from_scratch(models, tmp_path):
    """The run hands out its greedy continuations and teacher-forced passes; the agreement entry
    made from them (all of them, or with one model's pass missing and read then) is the one
    measured from scratch, fingerprint included; reads of other prompts are not used."""
    from polyplan.profiler.agreement_runs import measure_agreement

    greedy = ProfileSettings(SETTINGS.latency, dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,), decoded=False))
    outcome = profile_models(models, _prompts(), tmp_path / "p.json", greedy)
    reads = outcome.greedy
    assert reads is not None and set(reads.forced) == {"early", "ngram"}  # the target reads none: its argmax is its continuation
    pairs = [(p.verifier, p.drafter) for p in outcome.profile.pairs]
    ids = [p.ids for p in _prompts()]
    kwargs = dict(new_tokens=greedy.acceptance.new_tokens, seed=greedy.acceptance.seed)
    scratch = measure_agreement(models, pairs, ids, **kwargs)
    assert measure_agreement(models, pairs, ids, reads=reads, **kwargs) == scratch
    partial = dataclasses.replace(reads, forced={name: f for name, f in reads.forced.items() if name != "early"})
    assert measure_agreement(models, pairs, ids, reads=partial, **kwargs) == scratch
    # Negative control: reads of other continuations give other strings, and are refused for other prompts.
    shifted = dataclasses.replace(reads, forced={**reads.forced, "early": reads.forced["ngram"]})
    assert measure_agreement(models, pairs, ids, reads=shifted, **kwargs) != scratch
    assert measure_agreement(models, pairs, ids[:3], reads=shifted, **kwargs) == measure_agreement(models, pairs, ids[:3], **kwargs)


def test_greedy_decoded_entries_under_the_target_are_replayed_and_equal_decoding(models, tmp_path):
    """The run replays greedy decoded runs with the target verifying (fingerprint of its own, the
    entry marked) and they equal a real decoded run's μ, σ and verifications at K = 1, 2, 4; a
    pair verified by another model is decoded."""
    import numpy as np

    from polyplan.profiler.acceptance import measure_decoded

    acceptance = dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,), block_sizes=(1, 2, 4), decoded_prompts=None,
                                     decoded_verifications=None)
    outcome = profile_models(models, _prompts(6), tmp_path / "p.json", ProfileSettings(SETTINGS.latency, acceptance))
    members = {model.name: model.member for model in models}
    ids = [p.ids for p in _prompts(6)]
    for pair in outcome.profile.pairs:
        for decoded in pair.sampling["greedy"].decoded:
            assert decoded.replayed == (pair.verifier == "target"), (pair.verifier, pair.drafter)
            if not decoded.replayed:
                continue
            real = measure_decoded(members["target"], members[pair.drafter], ids, k=decoded.k, temperature=0.0, settings=acceptance,
                                   rng=np.random.default_rng(0))
            assert (decoded.mu, decoded.sigma, decoded.samples, decoded.prompts) == (real.mu, real.sigma, real.verifications, 6)
    assert read_profile(tmp_path / "p.json").stats("target", "early", "greedy").decoded_at(2).replayed  # it is written


def test_a_pair_that_cannot_pay_is_bounded_not_measured_in_full(models, tmp_path):
    """A drafter whose timings (kept from an earlier run, their fingerprints holding) put it at 0.95
    of the target's step, a token costing as much in a pass as alone (so no use as an intermediate
    level either), beside a target whose verification grows 10% a token, cannot pay at any acceptance: its pair under the target gets α on the
    first prompts only (the entry says how many), no decoded run, and the progress says "bounded";
    the other pairs are measured as before (the negative control)."""
    from polyplan.formats.profile import LatencyPoint

    greedy = ProfileSettings(SETTINGS.latency, dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,), decoded_prompts=None))
    out = tmp_path / "p.json"
    profile_models(models, _prompts(6), out, greedy)
    profile = read_profile(out)
    step = {p.context_length: p.median_s for p in profile.model("target").latency if p.k == 1}

    def timed(name: str, share: float, growth: float):  # k tokens in one pass cost `growth` more per token beyond the first
        model = profile.model(name)
        return dataclasses.replace(model, latency=tuple(
            dataclasses.replace(p, median_s=share * step[p.context_length] * (1 + growth * (p.k - 1)), samples_s=None)
            for p in model.latency))

    write_profile(dataclasses.replace(profile.with_model(timed("target", 1.0, 0.1)).with_model(timed("early", 0.95, 1.0)), pairs=()),
                  out)
    counter = Counter()
    outcome = profile_models(models, _prompts(6), out, greedy, progress=counter)
    bounds = {(b.verifier, b.drafter): b for b in outcome.bounds}
    assert not bounds[("target", "early")].can_pay and bounds[("target", "ngram")].can_pay
    assert any(label.startswith("alpha target <- early [greedy], bounded") for label in counter.measured)
    assert not any(label.startswith("decoded target <- early") for label in counter.measured + counter.reused)
    assert counter.totals[-1] == len(counter.measured) + len(counter.reused)
    saved = read_profile(out)
    bounded, full = saved.stats("target", "early", "greedy"), saved.stats("target", "ngram", "greedy")
    assert bounded.alpha_prompts == 4 and bounded.decoded == () and bounded.alpha_ci is None
    assert full.alpha_prompts is None and [d.k for d in full.decoded] == [2, 3] and full.alpha_ci is not None
    again = Counter()
    profile_models(models, _prompts(6), out, greedy, progress=again)
    assert again.measured == []  # the bounded entries hold on a rerun


def _clock(seconds: float, started: float | None = None):
    import time

    from polyplan.profiler.budget import Budget, BudgetClock

    return BudgetClock(Budget(seconds, f"{seconds:g}s"), time.perf_counter() if started is None else started, calibration_tokens=8)


def _run_with_budget(models, prompts, out, budget, settings=SETTINGS):
    from polyplan.profiler.run import profile_checked_models

    return profile_checked_models(models, prompts, out, settings, budget=budget)


def test_a_budget_takes_the_prompts_that_fit_and_says_what_more_would_buy(models, tmp_path, monkeypatch):
    """With each prompt priced at one second and the calibrations at none, a budget that leaves
    five seconds after the latency curves measures acceptance on the first five of eight prompts;
    a generous one on all eight; the profile records the prompts it is for."""
    from polyplan.profiler import budget as budget_module, run as run_module

    monkeypatch.setattr(run_module, "acceptance_cost", lambda *a, **k: budget_module.AcceptanceCost((1.0,) * 8))
    monkeypatch.setattr(run_module, "calibration_seconds", lambda *a, **k: 0.0)
    monkeypatch.setattr(run_module, "decoded_seconds", lambda *a, **k: 1e9)  # every real decoded run over the budget
    prompts = _prompts(8)
    spent = {}

    def plan(self):
        spent["at"] = self.budget.elapsed(__import__("time").perf_counter())
        return budget_module.plan_budget(self.budget.budget, spent["at"], budget_module.AcceptanceCost((1.0,) * 8), 0.0)

    monkeypatch.setattr(run_module._Run, "_plan_budget", plan)
    import time

    started = time.perf_counter()
    outcome = _run_with_budget(models, prompts, tmp_path / "p.json", _clock(5.5, started - 0.0))
    taken = outcome.budget.prompts
    assert taken == int(5.5 - spent["at"]) and 1 <= taken < 8  # whole prompts within what was left
    assert outcome.prompts == taken and read_profile(tmp_path / "p.json").profiler.prompts == taken
    lines = outcome.budget_lines()
    assert any(f"other {8 - taken} prompts" in line for line in lines)
    assert outcome.skipped and any("left out" in line and "decoded run(s)" in line for line in lines)
    # no real decoded run was measured; the replayed ones (greedy, under the target) cost nothing and are kept
    for pair in read_profile(tmp_path / "p.json").pairs:
        for mode, stats in pair.sampling.items():
            assert all(d.replayed for d in stats.decoded), (pair.verifier, pair.drafter, mode)
    monkeypatch.setattr(run_module, "decoded_seconds", lambda *a, **k: 0.0)
    whole = _run_with_budget(models, prompts, tmp_path / "q.json", _clock(1e6))
    assert whole.prompts == 8 and not whole.skipped


def test_a_budget_too_small_for_the_target_names_the_least_and_keeps_the_curves(models, tmp_path):
    with pytest.raises(PolyplanError) as error:
        _run_with_budget(models, _prompts(4), tmp_path / "p.json", _clock(1e-3))
    assert "too small to measure the target" in str(error.value) and "give at least --budget" in str(error.value)
    kept = read_profile(tmp_path / "p.json")  # the latency curves measured are kept for the next run
    assert {m.name for m in kept.models} == {m.name for m in models} and not kept.pairs


def test_a_budget_plans_only_what_is_measured(models, complete, tmp_path):
    """A complete profile rerun under a budget far too small measures nothing and refuses nothing."""
    import shutil

    shutil.copy(complete[0], tmp_path / "p.json")
    outcome = _run_with_budget(models, _prompts(), tmp_path / "p.json", _clock(1e-3))
    assert outcome.budget is None and outcome.budget_lines() == () and not outcome.measured


# ---- sequential measuring

def _stub_rule(resolved_after: int | None):
    """A stopping rule that says "resolved" once α is on `resolved_after` prompts (None: never),
    recording the prompts of every provisional profile and of the reads it was handed."""
    from polyplan.planner.intervals.sequential import Resolution

    calls = []

    def decide(profile, reads):
        prompts = profile.profiler.prompts
        calls.append((prompts, None if reads is None else len(reads.prompts)))
        done = resolved_after is not None and prompts >= resolved_after
        return Resolution(done, ("target", "early"), () if done else (("target", "ngram"),), "stub", prompts)

    return decide, calls


SEQUENTIAL = ProfileSettings(SETTINGS.latency, dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,), decoded_prompts=None))


def _reading(monkeypatch):
    """Counts the prompts each model is teacher-forced over, and the target's continuations, in the run."""
    import polyplan.profiler.run as run

    read = {"continued": 0}
    forced, views, continued = run.teacher_forced, run.teacher_forced_views, run.target_continuations_past

    def counting_forced(member, prompts, *args, **kwargs):
        read[id(member)] = read.get(id(member), 0) + len(prompts)
        return forced(member, prompts, *args, **kwargs)

    def counting_views(member, prompts, *args, **kwargs):
        read[id(member)] = read.get(id(member), 0) + len(prompts)
        return views(member, prompts, *args, **kwargs)

    def counting_continuations(target, prompts, **kwargs):
        read["continued"] += len(prompts)
        return continued(target, prompts, **kwargs)

    monkeypatch.setattr(run, "teacher_forced", counting_forced)
    monkeypatch.setattr(run, "teacher_forced_views", counting_views)
    monkeypatch.setattr(run, "target_continuations_past", counting_continuations)
    return read


def test_a_rule_resolved_after_the_first_round_measures_alpha_and_the_agreement_on_four_prompts(models, tmp_path, monkeypatch):
    """Eight prompts, a rule that is resolved at once: α (and the decoded runs) on the first 4
    prompts, entry for entry those of a run given only those 4; the greedy reads handed to the
    agreement runs are of the same 4 and make them without reading anything again."""
    import polyplan.profiler.agreement_runs as agreement_runs
    from polyplan.profiler.agreement_runs import measure_agreement
    from polyplan.profiler.run import profile_checked_models

    decide, calls = _stub_rule(4)
    outcome = profile_checked_models(models, _prompts(8), tmp_path / "p.json", SEQUENTIAL, decide=decide)
    assert calls == [(4, 4)]
    assert outcome.prompts == 4 and read_profile(tmp_path / "p.json").profiler.prompts == 4
    assert outcome.sequential.line() == "acceptance: decided after 4 of 8 prompts (stub)"
    first_four = profile_models(models, _prompts(4), tmp_path / "four.json", SEQUENTIAL)
    assert _entries(outcome.profile) == _entries(first_four.profile)
    ids = [p.ids for p in _prompts(8)][:4]
    pairs = [(p.verifier, p.drafter) for p in outcome.profile.pairs]
    kwargs = dict(new_tokens=SEQUENTIAL.acceptance.new_tokens, seed=SEQUENTIAL.acceptance.seed)
    scratch = measure_agreement(models, pairs, ids, **kwargs)

    def no_reading(*args, **kwargs):
        raise AssertionError("the agreement runs read again")

    monkeypatch.setattr(agreement_runs, "teacher_forced", no_reading)
    monkeypatch.setattr(agreement_runs, "target_continuations", no_reading)
    assert measure_agreement(models, pairs, ids, reads=outcome.greedy, **kwargs) == scratch


def test_a_rule_never_resolved_measures_every_prompt_reading_each_once(models, tmp_path, monkeypatch):
    """A rule that never resolves: rounds of 4 then 8 prompts, the rule asked after the first with
    the reads of that prefix (not after the last: nothing would be left to stop), and α on all 8, entry for entry a run without the rule; each prompt is
    continued and teacher-forced once per model (the second round extends the first's reads; no
    decoded runs here, whose replays read past the continuations' ends)."""
    from polyplan.profiler.run import profile_checked_models

    alpha_only = ProfileSettings(SEQUENTIAL.latency, dataclasses.replace(SEQUENTIAL.acceptance, decoded=False))
    everything = profile_models(models, _prompts(8), tmp_path / "all.json", alpha_only)
    read = _reading(monkeypatch)
    decide, calls = _stub_rule(None)
    outcome = profile_checked_models(models, _prompts(8), tmp_path / "p.json", alpha_only, decide=decide)
    assert calls == [(4, 4)]
    assert outcome.prompts == 8 and outcome.sequential.line() == "acceptance: all 8 prompts; after 4: stub"
    assert _entries(outcome.profile) == _entries(everything.profile)
    assert read["continued"] == 8
    assert {count for key, count in read.items() if key != "continued"} == {8}


def test_a_sequential_rerun_reuses_its_prefix_and_a_run_without_it_measures_every_prompt(models, tmp_path):
    """A rerun with the same rule keeps the entries of the prefix it stopped at (judged again,
    nothing measured); a rerun without the rule measures α on every prompt."""
    from polyplan.profiler.run import profile_checked_models

    out = tmp_path / "p.json"
    decide, _ = _stub_rule(4)
    profile_checked_models(models, _prompts(8), out, SEQUENTIAL, decide=decide)
    decide, calls = _stub_rule(4)
    again = Counter()
    rerun = profile_checked_models(models, _prompts(8), out, SEQUENTIAL, decide=decide, progress=again)
    assert again.measured == [] and calls == [(4, None)] and rerun.prompts == 4
    whole = Counter()
    assert profile_models(models, _prompts(8), out, SEQUENTIAL, progress=whole).prompts == 8
    assert any(label.startswith("alpha") for label in whole.measured)
    assert read_profile(out).profiler.prompts == 8


@pytest.mark.parametrize("ranked", [True, False])
def test_a_plan_decodes_only_the_pairs_of_the_chains_in_contention(models, tmp_path, ranked):
    """The exact model reads no decoded μ, so a plan's measuring decodes only the pairs of the
    chains its rule last found in contention (here the leader target > early alone): target >
    ngram is left out, said in the progress. The control: a rule that ranked nothing (no leader)
    leaves every pair the target verifies to be decoded."""
    from polyplan.planner.intervals.sequential import Resolution
    from polyplan.profiler.run import profile_checked_models

    def decide(profile, reads):
        prompts = profile.profiler.prompts
        if not ranked:
            return Resolution(False, (), (), "no decision on fewer than 8 prompts", prompts)
        return Resolution(False, ("target", "early"), (), "stub", prompts)

    acceptance = dataclasses.replace(SEQUENTIAL.acceptance, decoded_until_confirmed=True)
    counter = Counter()
    outcome = profile_checked_models(models, _prompts(8), tmp_path / "p.json", ProfileSettings(SETTINGS.latency, acceptance),
                                     decide=decide, progress=counter)
    decoded = {(pair.verifier, pair.drafter): [entry.k for entry in pair.sampling["greedy"].decoded] for pair in outcome.profile.pairs}
    left = [label for label in counter.reused if "still in contention" in label]
    assert decoded[("target", "early")]
    if ranked:
        assert decoded[("target", "ngram")] == [] and len(left) == 2
        assert all(label.startswith("decoded target <- ngram") for label in left)
    else:
        assert decoded[("target", "ngram")] and left == []


@pytest.mark.parametrize("planning", [True, False])
def test_a_plan_decodes_no_pair_another_model_than_the_target_verifies(models, tmp_path, planning):
    """A plan's measuring (`decoded_until_confirmed`) decodes no pair under another verifier: no
    ranking reads its decoded μ and the self-check decodes the leading chains whole; the progress
    says so. `polyplan profile` (the control) decodes it at every block size. α is read either way."""
    acceptance = dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,), decoded_until_confirmed=planning)
    counter = Counter()
    outcome = profile_models(models, _prompts(4), tmp_path / "p.json", ProfileSettings(SETTINGS.latency, acceptance),
                             progress=counter)
    kept = [entry.k for entry in outcome.profile.stats("early", "ngram", "greedy").decoded]
    left = [label for label in counter.reused if label.startswith("decoded early <- ngram") and "verified by early" in label]
    assert (kept, len(left)) == (([], 2) if planning else ([2, 3], 0))
    assert outcome.profile.stats("early", "ngram", "greedy").alpha is not None
    for drafter in ("early", "ngram"):
        assert [entry.k for entry in outcome.profile.stats("target", drafter, "greedy").decoded] == [2, 3]


@pytest.mark.parametrize("confirms", [True, False])
def test_a_plan_decodes_a_pair_only_until_a_run_confirms_its_teacher_forced_mu(models, tmp_path, monkeypatch, confirms):
    """`decoded_until_confirmed` (what recommend and the demo measure): a pair that really decodes
    (sampled, the target verifying) decodes its largest K first; a run that confirms the
    teacher-forced μ leaves the smaller K out (said in the progress, no entry, eq. 3 stands), one
    that does not is followed by every K (the negative control)."""
    import polyplan.profiler.run as run
    from polyplan.formats.sampling import SamplingMode

    real, calls = run.measure_decoded, []

    def decoded(verifier, drafter, prompts, *, k, **kwargs):
        calls.append((verifier.name, drafter.name, k))
        return dataclasses.replace(real(verifier, drafter, prompts, k=k, **kwargs), confirmed=confirms)

    monkeypatch.setattr(run, "measure_decoded", decoded)
    acceptance = dataclasses.replace(SETTINGS.acceptance, temperatures=(1.0,), decoded_until_confirmed=True)
    counter = Counter()
    outcome = profile_models(models, _prompts(4), tmp_path / "p.json", ProfileSettings(SETTINGS.latency, acceptance),
                             progress=counter)
    mode = SamplingMode(1.0).key
    for drafter in ("early", "ngram"):
        ks = [k for v, d, k in calls if (v, d) == ("target", drafter)]
        kept = [entry.k for entry in outcome.profile.stats("target", drafter, mode).decoded]
        assert ks == ([3] if confirms else [3, 2]) and kept == sorted(ks)
        left = [label for label in counter.reused if label.startswith(f"decoded target <- {drafter}") and "confirmed" in label]
        assert len(left) == (1 if confirms else 0)
    assert not [call for call in calls if call[0] != "target"]  # under the early exit: left out (the test above)


def test_a_run_records_how_it_decoded_each_greedy_stream(models, tmp_path):
    """One entry per prompt's greedy stream (`profiler.stream_drafting`): the first plainly, since
    no stream before it says whether prompt lookup pays; a rerun decodes none."""
    out = tmp_path / "p.json"
    outcome = profile_models(models, _prompts(), out, SETTINGS)
    assert len(outcome.stream_blocks) == 4 and outcome.stream_blocks[0] is None
    assert profile_models(models, _prompts(), out, SETTINGS).stream_blocks == ()
