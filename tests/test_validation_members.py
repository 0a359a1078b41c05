"""The members validation runs with: primed caches (decoding only) and the overhead stand-ins."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_llama, truncated_copy
from polyplan.decoder import HFMember, NGramMember, generate
from polyplan.profiler.loop_overhead import StandIn, measure_loop_overhead
from polyplan.validation.primed import PrimedMember

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(0, layers=2, hidden=32)
    return HFMember(target, name="target"), HFMember(truncated_copy(target, 1), name="exit1")


def test_primed_chain_decodes_the_same_tokens_without_the_prompt_in_any_pass(pair):
    target, draft = pair
    prompt = torch.tensor([5, 9, 14, 3, 22, 41, 7, 7, 12, 30])  # (10,)
    plain = generate([target, draft, NGramMember(64)], prompt, max_new_tokens=24, block_sizes=[3, 2])
    chain = [PrimedMember(target), PrimedMember(draft), PrimedMember(NGramMember(64))]
    seconds = [member.prime(prompt[:-1]) for member in chain]
    assert all(s >= 0 for s in seconds) and all(m.cache_length == 9 for m in chain)
    seen = []
    original = target.forward

    def spy(new_ids, keep_last=None):
        seen.append(int(new_ids.shape[0]))
        return original(new_ids, keep_last=keep_last)

    target.forward = spy
    try:
        primed = generate(chain, prompt, max_new_tokens=24, block_sizes=[3, 2])
    finally:
        del target.forward
    assert primed.token_ids == plain.token_ids
    # The prompt prefill (9 tokens) never reaches a timed pass: each verification feeds the
    # pending token plus at most the drafted tokens of one round (K_1 + K_2 = 5).
    assert seen and max(seen) <= 1 + 5
    assert primed.levels[0].forward_passes == plain.levels[0].forward_passes
    assert chain[0].cache_length >= 9  # reset() went back to the primed prefix, not to 0
    with pytest.raises(ValueError, match="below the primed prompt prefix"):
        chain[0].crop(3)


def test_a_reused_prime_crops_back_to_the_prompt_and_decodes_what_a_fresh_one_does(pair):
    """`prime(reuse=True)` after a run on the same prompt runs no forward pass and returns the
    first prime's seconds; the run after it decodes the tokens a freshly primed one does. Another
    prompt, or `reuse=False` (the control), primes again."""
    target, draft = pair
    prompt, other = torch.tensor([5, 9, 14, 3, 22, 41, 7, 7, 12, 30]), torch.tensor([8, 2, 19, 19, 4, 33, 6, 1])
    chain = [PrimedMember(target), PrimedMember(draft)]
    fresh = [member.prime(prompt[:-1]) for member in chain]
    first = generate(chain, prompt, max_new_tokens=16, block_sizes=[3])
    calls = []
    original = target.forward
    target.forward = lambda new_ids, keep_last=None: calls.append(int(new_ids.shape[0])) or original(new_ids, keep_last=keep_last)
    try:
        assert chain[0].prime(prompt[:-1], reuse=True) == fresh[0] and calls == []
        assert chain[0].cache_length == 9
        chain[1].prime(prompt[:-1], reuse=True)
        again = generate(chain, prompt, max_new_tokens=16, block_sizes=[3])
        assert again.token_ids == first.token_ids
        calls.clear()
        chain[0].prime(other[:-1], reuse=True)  # another prompt: primed
        assert calls == [7]
        calls.clear()
        chain[0].prime(other[:-1])  # the control: no reuse asked, primed again
        assert calls == [7]
    finally:
        del target.forward


def test_stand_in_rows_follow_their_token_pattern():
    member = StandIn(16, (0, 0, 5))
    logits = member.forward(torch.zeros(4, dtype=torch.int64))  # positions 0..3
    assert logits.argmax(dim=-1).tolist() == [0, 0, 5, 0]
    member.crop(2)
    assert member.forward(torch.zeros(1, dtype=torch.int64), keep_last=1).argmax().item() == 5


def test_loop_overhead_is_measured_from_rounds_that_accept_and_reject():
    verifier, drafter = StandIn(64, (0,)), StandIn(64, (0,) * 6 + (1,))
    result = generate([verifier, drafter], [1], max_new_tokens=64, block_sizes=[4])
    counts = result.levels[0].tokens_per_verification
    assert min(counts) < 5 and max(counts) == 5  # some rounds reject, some accept every draft
    overhead = measure_loop_overhead(64, tokens=64, repeats=3)
    assert 0 < overhead.per_step_s < 0.05 and 0 <= overhead.per_round_s < 0.05


def test_switch_costs_are_measured_for_every_model_and_leave_caches_empty(pair):
    from polyplan.models.fingerprints import ProfiledModel
    from polyplan.profiler.switching import measure_switch_costs

    target, draft = pair
    models = [ProfiledModel("target", target, "a"), ProfiledModel("exit1", draft, "b"), ProfiledModel("ngram", NGramMember(64), "c")]
    costs = measure_switch_costs(models, list(range(4, 60)), context=32, repeats=3)
    assert set(costs) == {"target", "exit1", "ngram"}
    assert all(len(cost) == 4 and all(0.0 <= c < 0.05 for c in cost) for cost in costs.values())
    assert target.cache_length == 0 and draft.cache_length == 0
