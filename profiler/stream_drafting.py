"""The target's greedy streams, decoded speculatively where the target's own curve says it pays.

Measuring acceptance starts with the target continuing every prompt greedily, one step per token:
on a 1.5B model that is most of a plan's measuring. Greedy speculative decoding emits exactly the
target's argmax at every position, so the same streams can be decoded faster with a drafter that
costs nothing: `ngram-simple` (prompt lookup, `decoder.ngram_simple`), which drafts only where the
stream repeats itself. Whether that pays depends on the machine (what a k-token pass costs in
target steps differs several-fold between CPUs) and on the workload (code repeats itself, chat
rarely), and both are known before a prompt is decoded: the target's latency curve is timed
first, and every stream decoded so far replays exactly under any block size
(`planner.exact.ngram_replay.chain_rounds`). So each prompt is decoded at the block size that
would have been fastest on the streams before it, or plainly where none gains `MIN_GAIN`
(the first prompt, a chat workload, a machine whose wide passes are dear).

What changes is only the time: the tokens are the target's argmax wherever a verification's
numerics equal a one-token step's (a wider pass can flip a near-tie, as the decoder's own
verifications can; `profiler.acceptance.own_greedy_read`). docs/profiling.md, "What it measures".
"""

from __future__ import annotations

from collections.abc import Sequence

from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.ngram_replay import chain_rounds

STREAM_BLOCKS = (3, 4, 6, 8, 12, 16)  # block sizes tried on the streams so far (ngram-simple drafts >= SIZE_N tokens)
SIZE_N = 3  # tokens an `ngram-simple` lookup matches (polyplan's member's default)
# The replayed gain a block size must promise before a stream is decoded with it: the replay
# prices the target's passes only, and the decoding loop's own cost per round is a few percent of
# a small model's step.
MIN_GAIN = 1.10


def stream_block(history: Sequence[TargetStream], curve: LatencyCurve) -> int | None:
    """The block size of `STREAM_BLOCKS` at which the chain target > ngram-simple(`SIZE_N`) would
    have decoded the streams in `history` fastest, priced by the target's `curve` T(k) alone
    (pure: a replay of the streams); None when there is no history or no block size gains
    `MIN_GAIN` over plain decoding."""
    best, best_gain = None, MIN_GAIN
    for block in STREAM_BLOCKS:
        tokens = seconds = 0.0
        for stream in history:
            for item in chain_rounds(stream, SIZE_N, block):
                tokens += item.accepted + 1
                seconds += curve(item.drafted + 1)
        gain = tokens * curve(1) / seconds if seconds > 0 else 0.0
        if gain > best_gain or (best is None and gain >= MIN_GAIN):
            best, best_gain = block, gain
    return best
