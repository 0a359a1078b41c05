"""The target's greedy streams decoded with prompt lookup (`profiler.stream_drafting`): the same
tokens as plain decoding, fewer target passes where the streams repeat and wide passes are cheap,
plain decoding where they are not."""

from __future__ import annotations

import torch

from table_member import TableMember
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.profiler.acceptance import target_continuations_past
from polyplan.profiler.stream_drafting import MIN_GAIN, STREAM_BLOCKS, stream_block

FLAT = LatencyCurve((1, 16), (1.0, 1.0))  # a wide pass costs one step: drafting can only gain
STEEP = LatencyCurve((1, 16), (1.0, 16.0))  # a k-token pass costs k steps: drafting can never gain


class Counting(TableMember):
    """A table member that records the width of every forward pass."""

    def __init__(self, table: torch.Tensor, widths: list[int]) -> None:
        super().__init__(table, name="target")
        self.widths = widths

    def forward(self, new_ids, keep_last=None):
        self.widths.append(len(new_ids))
        return super().forward(new_ids, keep_last)


def _target(widths: list[int]) -> Counting:
    """Greedy decoding of an order-4 table over 4 tokens falls into cycles, so its streams repeat
    (prompt lookup drafts) and a 3-token match does not fix the next token (some drafts fail)."""
    table = TableMember.random(4, 4, torch.Generator().manual_seed(1), scale=3.0).table
    return Counting(table, widths)


def _prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(2)
    return [torch.randint(0, 4, (n,), generator=generator).tolist() for n in (5, 9, 6, 12, 7, 10)]


def test_no_history_or_no_repeats_or_dear_passes_decode_plainly():
    periodic = TargetStream(3, (1, 2, 3) + tuple(range(10, 30)) * 5)  # a draft copies at most one period
    distinct = TargetStream(3, tuple(range(43)))
    assert stream_block([], FLAT) is None
    assert stream_block([distinct], FLAT) is None  # nothing repeats: ngram-simple never drafts
    assert stream_block([periodic], STEEP) is None  # a k-token pass at k steps: no block gains
    assert stream_block([periodic], FLAT) == max(STREAM_BLOCKS)  # every draft right, wide passes free: the widest
    # a pass of 8 tokens at 2 steps, 16 at 8: the replay's gain decides, and it clears MIN_GAIN
    bent = LatencyCurve((1, 8, 16), (1.0, 2.0, 8.0))
    block = stream_block([periodic], bent)
    assert block is not None and block < max(STREAM_BLOCKS)
    assert MIN_GAIN > 1.0


def test_drafted_streams_are_the_plain_streams_in_fewer_target_passes():
    plain_widths: list[int] = []
    prompts = _prompts()
    plain = target_continuations_past(_target(plain_widths), prompts, new_tokens=48, temperature=0.0, seed=0, past=3)
    drafted_widths: list[int] = []
    drafted = target_continuations_past(_target(drafted_widths), prompts, new_tokens=48, temperature=0.0, seed=0, past=3,
                                        curve=FLAT)
    assert [s.continuation for s in drafted] == [s.continuation for s in plain]
    assert [s.past for s in drafted] == [s.past for s in plain]
    assert drafted[0].block is None and all(s.block is not None for s in drafted[1:])
    assert len({s.block for s in drafted[1:]}) > 1  # the block follows the streams so far
    assert all(s.block is None for s in plain)
    assert len(drafted_widths) < 0.8 * len(plain_widths)  # fewer passes, some of them wide
    assert max(drafted_widths[len(prompts[0]) + 60:]) > 1
    # the control: where a k-token pass costs k steps nothing is drafted, pass for pass as plainly
    steep_widths: list[int] = []
    steep = target_continuations_past(_target(steep_widths), prompts, new_tokens=48, temperature=0.0, seed=0, past=3,
                                      curve=STEEP)
    assert all(s.block is None for s in steep) and steep_widths == plain_widths


def test_a_round_that_extends_earlier_streams_decodes_them_as_one_call_does():
    """Prompt i's block size depends on the streams before it, whether read in this call or
    handed in as `earlier` (the profiler's rounds), so rounds give what one call gives."""
    prompts = _prompts()
    whole = target_continuations_past(_target([]), prompts, new_tokens=32, temperature=0.0, seed=0, curve=FLAT)
    first = target_continuations_past(_target([]), prompts[:3], new_tokens=32, temperature=0.0, seed=0, curve=FLAT)
    earlier = [TargetStream(len(p), tuple(p) + s.continuation) for p, s in zip(prompts, first)]
    rest = target_continuations_past(_target([]), prompts[3:], new_tokens=32, temperature=0.0, seed=3, curve=FLAT,
                                     earlier=earlier)
    assert first + rest == whole


def test_sampled_streams_are_never_drafted():
    prompts = _prompts()
    widths: list[int] = []
    sampled = target_continuations_past(_target(widths), prompts, new_tokens=16, temperature=1.0, seed=0, curve=FLAT)
    control: list[int] = []
    again = target_continuations_past(_target(control), prompts, new_tokens=16, temperature=1.0, seed=0)
    assert sampled == again and widths == control and all(s.block is None for s in sampled)


def test_the_log_line_says_how_many_streams_were_drafted_and_at_which_block_sizes():
    from pathlib import Path

    from polyplan.profiler.run import ProfileOutcome

    def line(blocks):
        return ProfileOutcome(None, Path("p.json"), (), (), 0.0, None, stream_blocks=blocks).streams_line()

    assert line(()) is None  # this run decoded no stream (all reused)
    assert line((None, None)) is None  # none drafted: decoded as always, nothing to say
    assert line((None, 16, 12, 16)) == ("note: the target's greedy streams: 3 of 4 decoded speculatively with prompt lookup "
                                        "(block sizes 12, 16: the same tokens, sooner), the others plainly")
