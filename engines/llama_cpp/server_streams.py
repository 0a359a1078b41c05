"""The target's greedy answers as llama-server itself writes them.

llama-server's CPU kernels do not always reproduce the bindings' one-token decode: where the
target's two best tokens are nearly tied, the server's answer can take the other one
(docs/cost-model.md, "Near-ties a wide pass flips"). The n-gram rules draft from the text the
server writes, and a rule that remembers earlier answers (ngram-mod's table) drafts the server's
own answer again, so the export replays them over the server's answers where the server is built.
The answers also change with how many slots decode together (a batch of several slots' rows takes
another path than one row), so they are taken at each count of slots a plan is for: the prompts
sent to the target alone's server at `-np N`, N at a time, greedy. The server ends each answer
after the end-of-generation token it samples, which the answer keeps, as the bindings' streams end
(`prices.decode_greedy_streams`); it is not asked to ignore it, since a server that ignores the end
of sequence keeps it from being sampled and the text after it is not the model's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from polyplan.formats.profile import TargetStream
from polyplan.formats.cache import cache_root


def server_greedy_streams(build, path: Path, threads: int, prompts: Sequence[Sequence[int]], new_tokens: int,
                          server_flags: Sequence[str], log: Callable[[str], None] = lambda line: None, *, slots: int = 1,
                          server_factory=None) -> tuple[TargetStream, ...]:
    """Each prompt's greedy answer from llama-server (`build`) on `path` at `threads` with `slots`
    slots, the prompts sent `slots` at a time in order, up to `new_tokens` or its end of generation
    (module docstring); empty prompts are left out, as the bindings' streams leave them. `server_factory(args, log_path)` replaces `LlamaServer` (tests)."""
    from concurrent.futures import ThreadPoolExecutor

    from polyplan.engines.llama_cpp.server import LlamaServer, slot_args

    kept = [list(prompt) for prompt in prompts if len(prompt) > 0]
    if not kept:
        return ()
    context = max(len(prompt) for prompt in kept) + new_tokens + 8
    args = ("-t", str(threads), "-tb", str(threads), *slot_args(slots, context), "--no-webui", *server_flags)
    if server_factory is None:
        def server_factory(args, log_path):
            return LlamaServer(build.server, path, args, log_path)
    log(f"decoding {len(kept)} greedy answers with llama-server on {path.name} at {slots} slot(s) (once; cached)")
    logs = cache_root() / "engines" / "logs" / ("streams-" + time.strftime("%Y%m%d-%H%M%S"))
    with server_factory(args, logs / f"server-{slots}.log") as server:
        with ThreadPoolExecutor(slots) as pool:
            answers = list(pool.map(lambda prompt: server.complete(prompt, new_tokens, ignore_eos=False).token_ids[:new_tokens], kept))
    return tuple(TargetStream(len(prompt), tuple(prompt) + tuple(answer)) for prompt, answer in zip(kept, answers))
