"""Where a wide verification pass gives the target another token than its one-token stream.

`measure_near_ties` feeds each greedy stream back through the bindings teacher-forced, its
continuation in passes of w rows for each width w asked, and keeps the positions where the pass's
argmax is not the stream's next token (`planner.llama_cpp.near_ties` says why they matter and
what reads them). A pass of w rows costs T(w), so a stream of n tokens costs about n / w · T(w)
per width, after one prefill of its prompt; the result is kept in the prices' cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from polyplan.formats.profile import TargetStream
from polyplan.planner.llama_cpp.near_ties import NearTies, StreamTies, stream_digest

TIE_WIDTHS = (16, 64)  # one pass of many rows and one of the widest a server round reaches (ngram-mod's 64)


def measure_near_ties(path: Path, threads: int, streams: Sequence[TargetStream], widths: Sequence[int] = TIE_WIDTHS,
                      log: Callable[[str], None] = lambda line: None) -> NearTies:
    """The flips of `streams` in teacher-forced passes of each of `widths` rows through the
    bindings (module docstring)."""
    import torch

    from polyplan.decoder.llama_cpp import LlamaCppMember

    log(f"checking {len(streams)} greedy streams of {path.name} for near-ties a pass of {', '.join(map(str, widths))} "
        "rows flips (once; cached)")
    longest = max((len(stream.ids) for stream in streams), default=1)
    member = LlamaCppMember(path, threads=threads, context=longest + max(widths) + 8)
    found = []
    try:
        for stream in streams:
            prompt, end = stream.prompt_tokens, len(stream.ids)
            member.reset()
            member.forward_argmax(torch.tensor(stream.ids[:prompt]), keep_last=1)
            positions = []
            for width in widths:
                member.crop(prompt)  # the prompt's cache, prefilled once, under every width's passes
                flips = []
                for start in range(prompt, end - 1, width):  # rows from the prefill's token on, every pass `width` rows
                    block = list(stream.ids[start:start + width])
                    block += block[-1:] * (width - len(block))  # a causal pass: rows past the end move none before them
                    chosen = member.forward_argmax(torch.tensor(block)).tolist()
                    flips += [start + 1 + row - prompt for row in range(min(width, end - 1 - start))
                              if chosen[row] != stream.ids[start + 1 + row]]
                positions.append(tuple(flips))
            found.append(StreamTies(stream_digest(stream), tuple(positions)))
    finally:
        member.close()
    return NearTies(tuple(widths), tuple(found))
