"""A target pass never costs more for fewer tokens: the monotone envelope T̃(k), the widths it
pads verification passes to, the cost model on it, and the decoder running padded passes
(output unchanged, caches cropped back)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import perturbed_copy, tiny_llama
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.ngram import NGramMember
from polyplan.decoder.sampling import Sampling
from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.latency import LatencyCurve
from simulate_reference import simulate_chain
from polyplan.formats.codec import decode, encode
from polyplan.formats.plan import NO_PADDING, VerifyWidths
from polyplan.planner.exact.verify_width import monotone_envelope, verify_widths

pytestmark = pytest.mark.usefixtures("single_thread")

# gemma-3-270m, fp32, 1 thread (issue 11): verifying 2 tokens cost more than verifying 4
GEMMA = LatencyCurve(ks=(1, 2, 4, 8), seconds=(0.145, 0.262, 0.245, 0.293))


def test_envelope_of_the_gemma_curve():
    envelope = monotone_envelope(GEMMA)
    assert envelope.ks == tuple(range(1, 9))
    # k = 2, 3 run at width 4 (T(3) read between 2 and 4 is 0.2535 > T(4)); 5…8 keep their own
    expected = [0.145, 0.245, 0.245, 0.245, 0.257, 0.269, 0.281, 0.293]
    np.testing.assert_allclose(envelope.seconds, expected, rtol=1e-12)
    assert verify_widths(GEMMA) == VerifyWidths(((2, 4), (3, 4)))
    assert verify_widths(GEMMA).width(3) == 4 and verify_widths(GEMMA).width(5) == 5
    assert verify_widths(GEMMA).max_padding == 2
    # above the largest measured width the envelope continues the curve's slope
    assert envelope(12) == pytest.approx(GEMMA(12))


def test_envelope_of_a_monotone_curve_is_the_curve():
    curve = LatencyCurve(ks=(1, 2, 4, 8), seconds=(0.01, 0.012, 0.015, 0.03))
    envelope = monotone_envelope(curve)
    grid = np.arange(1, 9, dtype=float)
    np.testing.assert_allclose(envelope.many(grid), curve.many(grid), rtol=1e-12)
    assert verify_widths(curve) == NO_PADDING


def test_envelope_picks_the_smallest_width_at_the_minimum_and_never_decreases():
    rng = np.random.default_rng(0)
    for _ in range(200):
        ks = tuple(sorted(rng.choice(np.arange(1, 20), size=rng.integers(1, 6), replace=False).tolist()))
        curve = LatencyCurve(ks=ks, seconds=tuple(rng.uniform(0.01, 0.1, size=len(ks)).tolist()))
        envelope = monotone_envelope(curve)
        widths = verify_widths(curve)
        values = np.asarray(envelope.seconds)
        assert (np.diff(values) >= -1e-15).all()
        for k in range(1, max(ks) + 1):
            width = widths.width(k)
            assert width >= k
            assert values[k - 1] == pytest.approx(curve(width))  # what the padded pass costs
            assert values[k - 1] <= curve(k) + 1e-15
            cheaper = [j for j in ks if j >= k and curve(j) < values[k - 1] - 1e-15]
            assert not cheaper
            if width > k:
                assert width in ks and not any(curve(j) == values[k - 1] for j in ks if k <= j < width)


def test_verify_widths_json_round_trip_and_errors():
    widths = VerifyWidths(((2, 4), (3, 4)))
    assert encode(widths) == [[2, 4], [3, 4]] and decode(VerifyWidths, encode(widths), "x") == widths
    with pytest.raises(PolyplanError, match=r"x: width 2 for 3 tokens"):
        decode(VerifyWidths, [[3, 2]], "x")
    with pytest.raises(PolyplanError, match=r"x: must be a JSON array"):
        decode(VerifyWidths, {"2": 4}, "x")


def test_cost_model_pays_the_envelope_and_matches_the_padded_simulation():
    drafter = LatencyCurve(ks=(1,), seconds=(0.01,))
    padded = predict_chain([0.7], [GEMMA, drafter], [2])
    unpadded = predict_chain([0.7], [GEMMA, drafter], [2], pad_verification=False)
    on_envelope = predict_chain([0.7], [monotone_envelope(GEMMA), drafter], [2], pad_verification=False)
    assert padded.cost_per_token == pytest.approx(on_envelope.cost_per_token, rel=1e-12)
    assert padded.cost_per_token < unpadded.cost_per_token  # a pass over 2 or 3 tokens is cheaper padded to 4
    # the Monte-Carlo reference runs each pass at the recorded width and pays T there
    simulated = simulate_chain([0.7], [GEMMA, drafter], [2], rounds=40_000, rng=np.random.default_rng(1))
    assert simulated.cost_per_token.value == pytest.approx(padded.cost_per_token, rel=0.01)


def test_decoder_rejects_a_wrong_number_of_width_maps():
    model = tiny_llama(0, layers=1)
    with pytest.raises(PolyplanError, match="verify_widths: a chain of 2 members needs 1"):
        generate([HFMember(model), NGramMember(64)], [5, 6], max_new_tokens=4, block_sizes=[2],
                 verify_widths=[NO_PADDING, NO_PADDING])


@pytest.fixture(scope="module")
def models(single_thread):
    target = tiny_llama(0, layers=3, init=0.1)
    return target, perturbed_copy(target, 0.03, seed=1), perturbed_copy(target, 0.08, seed=2)


PAD_ALL = VerifyWidths(tuple((k, 9) for k in range(1, 9)))  # every pass over < 9 tokens runs at 9


@pytest.mark.parametrize("names", [("target", "close"), ("target", "close", "noisy"), ("target", "ngram")])
def test_greedy_output_is_unchanged_by_padding(models, names):
    target, close, noisy = models
    by_name = {"target": target, "close": close, "noisy": noisy}
    generator = torch.Generator().manual_seed(5)
    for _ in range(6):
        prompt = torch.randint(3, 64, (int(torch.randint(1, 8, (1,), generator=generator)),), generator=generator).tolist()
        outputs = []
        for widths in ((), (PAD_ALL,) * (len(names) - 1)):
            chain = [NGramMember(64) if n == "ngram" else HFMember(by_name[n], name=n) for n in names]
            blocks = [3] * (len(names) - 1)
            outputs.append(generate(chain, prompt, max_new_tokens=20, block_sizes=blocks, verify_widths=widths).token_ids)
        plain = generate([HFMember(target)], prompt, max_new_tokens=20).token_ids
        assert outputs[0] == outputs[1] == plain


class _Recording(HFMember):
    """An HFMember that records the width of every pass and its cache length after each crop."""

    def __init__(self, model, name):
        super().__init__(model, name=name)
        self.widths, self.crops = [], []

    def forward(self, new_ids, keep_last=None):
        self.widths.append(len(new_ids))
        return super().forward(new_ids, keep_last)

    def crop(self, length):
        super().crop(length)
        self.crops.append((length, self.cache_length))


def test_a_padded_pass_is_cropped_back_and_gives_the_same_logits(models):
    target, close, _ = models
    prompt = [5, 9, 11, 4]
    padded = _Recording(target, "target")
    result = generate([padded, HFMember(close, name="close")], prompt, max_new_tokens=12, block_sizes=[3],
                      verify_widths=[VerifyWidths(((4, 7),))])
    # the first pass feeds the prompt and 3 drafts (7 tokens, not padded); later ones 1 + 3 = 4, run at 7
    assert padded.widths[0] == len(prompt) + 3 and all(w == 7 for w in padded.widths[1:])
    assert all(length == after for length, after in padded.crops)  # every crop reached its length
    end = len(prompt) + len(result.token_ids)
    assert padded.cache_length <= end  # no padding left in the cache
    # logits of the real rows of a padded pass equal an unpadded pass's over the same prefix
    sequence = torch.tensor(prompt + list(result.token_ids[:3]))
    one, two = HFMember(target), HFMember(target)
    real = one.forward(sequence, keep_last=3)
    with_pad = two.forward(torch.cat([sequence, sequence[-1:].expand(4)]), keep_last=7)[:3]
    torch.testing.assert_close(real, with_pad, rtol=1e-5, atol=1e-5)
    assert two.cache_length == len(sequence) + 4
    two.crop(len(sequence))
    torch.testing.assert_close(two.forward(torch.tensor([7]))[-1], HFMember(target).forward(torch.cat([sequence, torch.tensor([7])]))[-1],
                               rtol=1e-5, atol=1e-5)


def test_padding_with_sampling_keeps_the_seeded_output(models):
    """Padding changes no random draw: the same seed gives the same sampled tokens."""
    target, close, noisy = models
    outputs = []
    for widths in ((), (PAD_ALL, PAD_ALL)):
        chain = [HFMember(target), HFMember(close), HFMember(noisy)]
        generator = torch.Generator().manual_seed(3)
        outputs.append(generate(chain, [4, 8], max_new_tokens=16, block_sizes=[2, 2], sampling=Sampling(1.0),
                                generator=generator, verify_widths=widths).token_ids)
    assert outputs[0] == outputs[1]


def _non_monotone_profile():
    """A target whose pass over 2–3 tokens costs more than over 4 (as gemma-3-270m's), one drafter."""
    from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile, SamplingStats

    seconds = dict(zip(GEMMA.ks, GEMMA.seconds))
    models = (ModelProfile("A", "fp-A", tuple(LatencyPoint(256, k, s) for k, s in seconds.items())),
              ModelProfile("B", "fp-B", tuple(LatencyPoint(256, k, 0.01 * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8))))
    return Profile(target="A", device="synthetic", models=models, pairs=()).with_stats("A", "B", "greedy", SamplingStats(alpha=0.8))


def test_the_plan_records_the_widths_it_assumed(tmp_path):
    import json

    from polyplan.formats.plan import read_plan
    from polyplan.formats.plan import write_plan
    from polyplan.planner.plan_builder import plan_of
    from polyplan.planner.search import SearchSettings, evaluate_chain, rank_chains

    profile = _non_monotone_profile()
    result = rank_chains(profile, SearchSettings(k_max=4))
    path = tmp_path / "plan.json"
    write_plan(plan_of(result, profile_path="profile.json"), path)
    payload = json.loads(path.read_text())
    assert payload["alternatives"][0]["verify_widths"] == [[[2, 4], [3, 4]]]
    chains = read_plan(path).alternatives
    two_model = next(chain for chain in chains if chain.chain == ("A", "B"))
    assert two_model.verify_widths == (VerifyWidths(((2, 4), (3, 4))),)
    # the recorded prediction is the padded one
    planned = evaluate_chain(profile, ("A", "B"), [1])
    assert planned.exact.cost_per_token < predict_chain([0.8], [GEMMA, LatencyCurve((1, 2, 4, 8), (0.01, 0.011, 0.013, 0.017))],
                                                          [1], pad_verification=False).cost_per_token
    # a plan from before the widths were recorded reads as "never pad"
    for entry in payload["alternatives"]:
        del entry["verify_widths"]
    path.write_text(json.dumps(payload))
    assert all(chain.verify_widths == () for chain in read_plan(path).alternatives)
    payload["alternatives"][0]["verify_widths"] = [[[3, 2]]]
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=r"alternatives\[0\]\.verify_widths\[0\]: width 2 for 3 tokens"):
        read_plan(path).alternatives


def test_recommend_says_which_passes_it_pads():
    from polyplan.cli.commands.recommend import table_lines
    from polyplan.planner.search import SearchSettings, rank_chains

    lines = table_lines(rank_chains(_non_monotone_profile(), SearchSettings(k_max=4)))
    assert "padded: A verifies 2 tokens at width 4, 3 tokens at width 4 (cheaper there: its T(k) is not monotone)" in lines


def test_validation_reserves_the_context_the_decoder_checks_with_padding():
    """Found by the slow quick-demo test: validation fitted prompts for the block sizes alone,
    then the decoder (which also reserves the widest padding) refused the longest prompt."""
    import dataclasses

    from polyplan.decoder.chain import context_reserve
    from polyplan.formats.plan import ExactRecord, PaperRecord, PlannedChain
    from polyplan.validation.results import ChainSpec
    from polyplan.validation.chain_runs import reserve_for

    padded = VerifyWidths(pads=((2, 4), (3, 4)))  # a pass over 2 tokens runs at width 4: 2 extra
    planned = PlannedChain(
        chain=("t", "d"), block_sizes=(5,),
        exact=ExactRecord(speedup=1.5, acceptances=(0.8,), forwards_per_token=(0.3, 1.0), tokens_per_verification=(3.0,),
                          drafted_per_verification=(5.0,), time_per_token_s=(0.01, 0.001), overhead_per_token_s=0.0),
        paper=PaperRecord(speedup=2.0, phi_per_token=(0.3, 1.0), mean_lengths=(3.0,)),
    )
    plain = ChainSpec(planned, ("recommended",), 1)
    with_pads = ChainSpec(dataclasses.replace(planned, verify_widths=(padded,)), ("recommended",), 1)
    assert context_reserve((5,), (padded,)) == 5 + 2
    assert reserve_for([plain], 16) == 16 + 5
    assert reserve_for([plain, with_pads], 16) == 16 + 7  # negative control above: no padding, no extra
