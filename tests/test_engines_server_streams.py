"""The target's answers as llama-server writes them (`engines.llama_cpp.server_streams`) and how
the export uses them: a fake server stands in for llama-server, so these check what is sent, what
is kept and which count of slots reads which answers, not the server's numerics."""

from __future__ import annotations

import threading
from pathlib import Path

from polyplan.engines.llama_cpp.server import Completion
from polyplan.engines.llama_cpp.server_streams import server_greedy_streams
from polyplan.formats.profile import TargetStream

STOP = 99


class _FakeServer:
    """Answers each prompt with 10 + its first token, counting up, and an end of sequence after
    three tokens for prompts that start with 7; records the requests in flight at once."""

    def __init__(self, args, log_path, seen):
        self.args, self.seen = tuple(args), seen
        self.lock = threading.Lock()
        self.in_flight = 0

    def __enter__(self):
        self.seen.append(self)
        self.most = 0
        return self

    def __exit__(self, *exc):
        return None

    def complete(self, prompt, n, *, ignore_eos=True):
        assert ignore_eos is False  # an ignored end of sequence changes the text after it
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        import time
        time.sleep(0.05)
        answer = [10 + prompt[0] + i for i in range(n)]
        if prompt[0] == 7:
            answer = answer[:2] + [STOP]
        with self.lock:
            self.in_flight -= 1
        return Completion(tuple(answer), len(answer), 1.0, 1.0, 0, 0, 0.1)


def test_each_prompt_is_answered_by_the_server_at_its_slots_and_ends_at_its_stop(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path))
    seen = []
    prompts = ((1, 2, 3), (), (7, 8), (4,))
    streams = server_greedy_streams(None, Path("t.gguf"), 2, prompts, 5, ("--no-repack",),
                                    slots=2, server_factory=lambda args, log_path: _FakeServer(args, log_path, seen))
    assert streams == (TargetStream(3, (1, 2, 3, 11, 12, 13, 14, 15)), TargetStream(2, (7, 8, 17, 18, STOP)),
                       TargetStream(1, (4, 14, 15, 16, 17, 18)))  # the empty prompt left out, as the bindings leave it
    (server,) = seen
    args = server.args
    assert args[args.index("-np") + 1] == "2" and args[args.index("-c") + 1] == str(2 * (3 + 5 + 8))
    assert args[args.index("-t") + 1] == "2" and "--no-repack" in args
    assert server.most == 2  # two slots, two requests at once
    seen.clear()
    server_greedy_streams(None, Path("t.gguf"), 2, prompts, 5, (),
                          server_factory=lambda args, log_path: _FakeServer(args, log_path, seen))
    assert seen[0].most == 1 and seen[0].args[seen[0].args.index("-np") + 1] == "1"  # one slot: one at a time


def test_each_count_is_replayed_over_its_own_answers():
    from polyplan.planner.llama_cpp.under_load import _by_answers

    class _Request:
        answers = ((1, ("a",)), (2, ("a",)), (4, ("b",)))

    assert _by_answers(_Request(), [1, 2, 3, 4]) == [(("a",), [1, 2]), (None, [3]), (("b",), [4])]
    _Request.answers = ()
    assert _by_answers(_Request(), [1, 4]) == [(None, [1, 4])]  # no server answers: the profile's streams at every count
