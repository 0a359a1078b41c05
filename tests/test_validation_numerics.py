"""Near-ties (validation.numerics): a chain whose greedy output parts from target-only decoding
only where the target's own logits move between one-token steps and batched passes is measured;
a chain that parts anywhere else stays lossy."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from polyplan.validation.numerics import batch_shape_noise, near_ties, tie_margin
from polyplan.validation.results import RunRecord

VOCAB = 8


class BatchShapeMember:
    """A toy target whose next-token logits depend on the last token only, plus `bias` on token
    5 in any pass over more than one token (as llama.cpp's k-row kernels move its logits)."""

    name = "toy"
    vocab_size = valid_vocab_size = VOCAB
    eos_token_id = None
    max_context = None

    def __init__(self, bias: float) -> None:
        self.bias = bias
        self.table = torch.zeros(VOCAB, VOCAB)
        self.table[:, 1] = 2.0  # after most tokens: 1
        self.table[2, 4], self.table[2, 5] = 3.0, 2.9  # after 2: 4, and 5 only 0.1 behind
        self._tokens: list[int] = []

    @property
    def cache_length(self) -> int:
        return len(self._tokens)

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        ids = new_ids.tolist()
        self._tokens += ids
        rows = self.table[ids].clone()
        if len(ids) > 1:
            rows[:, 5] += self.bias
        return rows if keep_last is None else rows[len(ids) - keep_last:]

    def crop(self, length: int) -> None:
        del self._tokens[length:]

    def reset(self) -> None:
        self._tokens.clear()

    def token_map(self):
        return None


def record(chain: int, prompt: int, tokens: tuple[int, ...]) -> RunRecord:
    return RunRecord(chain, 0, prompt, 1.0, 0.0, tokens, (1,), (1.0,), ((1,),), (0,), (0,))


SPECS = [SimpleNamespace(planned=SimpleNamespace(chain=("toy",), block_sizes=())),
         SimpleNamespace(planned=SimpleNamespace(chain=("toy", "draft"), block_sizes=(3,)))]
PROMPTS = [[3, 2]]


def test_margin_and_noise_read_the_target_as_each_decoding_does():
    member = BatchShapeMember(bias=0.3)
    assert tie_margin(member, torch.tensor([3, 2]), 4, 5) == pytest.approx(0.1)  # a one-token step after 2
    text = torch.tensor([3, 2, 1, 1, 2, 4, 1, 1, 2])
    assert batch_shape_noise(member, text, 2, 4) == pytest.approx(0.3)
    assert batch_shape_noise(BatchShapeMember(bias=0.0), text, 2, 4) == 0.0
    assert member.cache_length == 0  # every measurement leaves the member empty


def test_a_parting_within_the_noise_is_a_near_tie_and_one_beyond_it_is_not():
    target_only = record(0, 0, (4, 1, 1, 2, 4, 1, 1, 2))
    batched = record(1, 0, (5, 1, 1, 2, 4, 1, 1, 2))  # the chain read position 0 in a 4-token pass: 5 by 0.2
    ties = near_ties(SPECS, [target_only, batched], 0, BatchShapeMember(bias=0.3), PROMPTS)
    assert set(ties) == {1}
    tie = ties[1]
    assert tie.runs == 1 and tie.worst_margin == pytest.approx(0.1) and tie.noise == pytest.approx(0.3) and tie.width == 4
    assert "within the 0.3" in tie.line()
    # the same parting on a target whose logits do not move with the batch: a real difference
    assert near_ties(SPECS, [target_only, batched], 0, BatchShapeMember(bias=0.0), PROMPTS) == {}
    # a parting to a token far behind (1 is 1.0 below 4): lossy whatever the noise
    wrong = record(1, 0, (1, 1, 1, 2, 4, 1, 1, 2))
    assert near_ties(SPECS, [target_only, wrong], 0, BatchShapeMember(bias=0.3), PROMPTS) == {}
    # a run that only stops early (no two tokens to compare) keeps the chain lossy, near-tie or not
    short = record(1, 0, target_only.token_ids[:5])
    assert near_ties(SPECS, [target_only, batched, short], 0, BatchShapeMember(bias=0.3), PROMPTS) == {}
    # a chain that never parts is not listed
    assert near_ties(SPECS, [target_only, record(1, 0, target_only.token_ids)], 0, BatchShapeMember(bias=0.3), PROMPTS) == {}


def test_a_near_tie_chain_is_measured_and_reported_as_such():
    from polyplan.formats.plan import PlannedChain  # noqa: F401 (the spec type the summary reads)
    from polyplan.validation.results import ChainResult, MeasuredChain

    fields = {name: None for name in MeasuredChain.__dataclass_fields__}
    assert "near_tie" in fields

    def chain(near_tie):
        measured = MeasuredChain(**{**fields, "greedy_equal": False, "near_tie": near_tie, "paired": None,
                                    "speedup": SimpleNamespace(mean=1.2)})
        return ChainResult(*[None] * 5, measured, None)

    lossy, tied = chain(None), chain("1 run(s) part ...")
    assert not lossy.lossless and lossy.measured_speedup is None and lossy.measured.text() == "LOSSY"
    assert tied.lossless and tied.measured_speedup == pytest.approx(1.2)
