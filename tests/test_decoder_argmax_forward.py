"""Greedy decoding on argmaxes only (`member.ArgmaxForward`, `sampling.argmax_ids`).

Under greedy sampling the chain asks a member that offers `forward_argmax` for its argmaxes
instead of its logits rows (llama.cpp's member takes them in its own buffer). What is checked,
on torch members given that capability by a wrapper: outputs and rounds are identical with and
without it, for chains of one to three members, a rule drafter and padded verification widths;
ties go to the lowest id and padded vocabulary ids never win, as with `torch.argmax` over the
valid vocabulary (a capability that ignores the valid vocabulary changes the output: the
negative control); the chain really calls it and not `forward` (a spy); and at a temperature the
chain still reads rows, with the same samples as before. The llama.cpp member's own
`forward_argmax` is checked in `test_decoder_llama_cpp.py`.
"""

from __future__ import annotations

import pytest
import torch

from conftest import perturbed_copy, tiny_llama
from table_member import TableMember
from wrapped_member import WrappedMember
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.member import ArgmaxForward
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.decoder.sampling import Sampling, argmax_ids
from polyplan.formats.plan import VerifyWidths
from polyplan.validation.primed import PrimedMember

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPT = [5, 9, 33, 7, 5, 9]
NEW_TOKENS = 24


class Plain(WrappedMember):
    """A member seen only through the `ChainMember` protocol, counting its forward calls."""

    def __init__(self, member) -> None:
        super().__init__(member)
        self.calls = {"forward": 0, "forward_argmax": 0}

    def forward(self, new_ids, keep_last=None):
        self.calls["forward"] += 1
        return super().forward(new_ids, keep_last=keep_last)


class OwnArgmax(Plain):
    """The same member offering `forward_argmax`, taken from its rows the way `LlamaCppMember`
    takes it: over the valid vocabulary (all of it with `valid_only=False`, a broken capability)."""

    def __init__(self, member, *, valid_only: bool = True) -> None:
        super().__init__(member)
        self.valid_only = valid_only

    def forward_argmax(self, new_ids, keep_last=None):
        self.calls["forward_argmax"] += 1
        rows = self.inner.forward(new_ids, keep_last=keep_last)
        return argmax_ids(rows[:, : self.valid_vocab_size] if self.valid_only else rows)


class Padded:
    """A table member with `extra` padding ids after its vocabulary, whose logits are the
    largest of every row (as unmasked padding could be)."""

    eos_token_id = None
    max_context = None

    def __init__(self, table: TableMember, extra: int = 3) -> None:
        self.table = table
        self.name = table.name
        self.valid_vocab_size = table.vocab_size
        self.vocab_size = table.vocab_size + extra
        self.extra = extra

    @property
    def cache_length(self) -> int:
        return self.table.cache_length

    def forward(self, new_ids, keep_last=None):
        rows = self.table.forward(new_ids, keep_last=keep_last)
        return torch.cat([rows, torch.full((rows.shape[0], self.extra), 1e4)], dim=1)

    def crop(self, length: int) -> None:
        self.table.crop(length)

    def reset(self) -> None:
        self.table.reset()

    def token_map(self):
        return None


def reference_greedy(member, prompt: list[int], steps: int) -> list[int]:
    """Plain greedy decoding with `torch.argmax` over the valid vocabulary, one token a step."""
    member.reset()
    logits = member.forward(torch.tensor(prompt), keep_last=1)
    out = []
    for _ in range(steps):
        out.append(int(logits[-1, : member.valid_vocab_size].argmax()))
        logits = member.forward(torch.tensor(out[-1:]), keep_last=1)
    member.reset()
    return out


def tie_table(seed: int, vocab: int = 8) -> TableMember:
    """Logits drawn from {0, 1, 2}: most rows have their maximum at two or more ids."""
    generator = torch.Generator().manual_seed(seed)
    return TableMember(torch.randint(0, 3, (vocab + 1, vocab + 1, vocab), generator=generator).double(), name=f"ties-{seed}")


def test_argmax_ids_breaks_ties_and_nans_as_torch_argmax():
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 4, (64, 50), generator=generator).float()  # many ties in every row
    rows[3] = -torch.inf
    rows[4, [7, 20]] = torch.nan
    rows[5, 11] = torch.inf
    assert (rows[:, :-1] == rows.max(dim=1, keepdim=True).values).sum(dim=1).ge(2).sum() > 50  # ties that a last-max rule would break otherwise
    for logits in (rows, rows.double(), rows[:, 3:41], rows.bfloat16()):
        assert torch.equal(argmax_ids(logits), logits.argmax(dim=-1)), logits.dtype
        assert argmax_ids(logits).dtype == torch.int64
    assert argmax_ids(rows)[4] == 7 and argmax_ids(rows)[3] == 0


@pytest.fixture(scope="module")
def models(single_thread):
    target = tiny_llama(0, layers=2, init=0.1)
    return {"target": target, "close": perturbed_copy(target, 0.02, seed=1), "other": tiny_llama(7, layers=1, init=0.1)}


CHAINS = {
    "target alone": (["target"], []),
    "target > close": (["target", "close"], [4]),
    "target > close > other": (["target", "close", "other"], [5, 2]),
    "target > ngram-simple": (["target", "ngram-simple"], [6]),
}


def build(models, names, wrap):
    return [NGramSimpleMember(64, size_n=1) if name == "ngram-simple" else wrap(HFMember(models[name], name=name)) for name in names]


@pytest.mark.parametrize("label", list(CHAINS))
@pytest.mark.parametrize("padded", [False, True], ids=["exact widths", "padded widths"])
def test_greedy_output_and_rounds_are_identical_with_and_without_the_capability(models, label, padded):
    names, blocks = CHAINS[label]
    widths = [VerifyWidths(tuple((k, 8) for k in range(1, 8)))] * len(blocks) if padded else []
    runs = {}
    for wrap in (Plain, OwnArgmax):
        chain = build(models, names, wrap)
        result = generate(chain, PROMPT, max_new_tokens=NEW_TOKENS, block_sizes=blocks, verify_widths=widths, sampling=Sampling(0.0))
        runs[wrap.__name__] = result
        members = [member for member in chain if isinstance(member, Plain)]
        assert all(member.calls["forward"] > 0 for member in members) is (wrap is Plain)
        assert all(member.calls["forward_argmax"] > 0 for member in members) is (wrap is OwnArgmax)
    assert runs["OwnArgmax"].token_ids == runs["Plain"].token_ids
    assert list(runs["Plain"].token_ids) == reference_greedy(HFMember(models["target"]), PROMPT, NEW_TOKENS)
    for fast, slow in zip(runs["OwnArgmax"].levels, runs["Plain"].levels):
        assert (fast.forward_passes, fast.tokens_per_verification) == (slow.forward_passes, slow.tokens_per_verification)


@pytest.mark.parametrize("wrap", [Plain, OwnArgmax])
def test_ties_go_to_the_lowest_id_and_padding_never_wins(wrap):
    target, drafter = Padded(tie_table(0)), Padded(tie_table(1))
    expected = reference_greedy(target, [1, 2], 30)
    result = generate([wrap(target), wrap(drafter)], [1, 2], max_new_tokens=30, block_sizes=[3], sampling=Sampling(0.0))
    assert list(result.token_ids) == expected
    assert max(result.token_ids) < target.valid_vocab_size
    assert result.levels[0].tokens_drafted > result.levels[0].tokens_accepted > 0  # rounds accepted and rejected


def test_negative_control_a_capability_over_the_padded_vocabulary_changes_the_output():
    target, drafter = Padded(tie_table(0)), Padded(tie_table(1))
    chain = [OwnArgmax(target, valid_only=False), OwnArgmax(drafter, valid_only=False)]
    result = generate(chain, [1, 2], max_new_tokens=30, block_sizes=[3], sampling=Sampling(0.0))
    assert list(result.token_ids) != reference_greedy(target, [1, 2], 30)


def test_sampling_at_a_temperature_reads_rows_and_is_unchanged(models):
    runs = {}
    for wrap in (Plain, OwnArgmax):
        chain = build(models, ["target", "close", "other"], wrap)
        generator = torch.Generator().manual_seed(3)
        result = generate(chain, PROMPT, max_new_tokens=NEW_TOKENS, block_sizes=[3, 2], sampling=Sampling(1.0, top_k=5), generator=generator)
        runs[wrap.__name__] = result.token_ids
        assert all(member.calls["forward_argmax"] == 0 and member.calls["forward"] > 0 for member in chain)
    assert runs["OwnArgmax"] == runs["Plain"]


def test_a_primed_member_passes_the_capability_on(models):
    member = OwnArgmax(HFMember(models["target"]))
    primed, plain = PrimedMember(member), PrimedMember(Plain(HFMember(models["target"])))
    assert isinstance(primed, ArgmaxForward) and not isinstance(plain, ArgmaxForward)
    primed.prime(torch.tensor(PROMPT[:-1]))
    result = generate([primed], PROMPT, max_new_tokens=8, sampling=Sampling(0.0))
    assert member.calls["forward_argmax"] == 8
    assert list(result.token_ids) == reference_greedy(HFMember(models["target"]), PROMPT, 8)
