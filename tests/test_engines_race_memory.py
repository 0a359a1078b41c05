"""Races that fit: `bench peers --engine llama.cpp` estimates each llama-server's
memory, races in groups that fit (the target alone and polyplan's plan in every group, requests
interleaved within a group, speedups over the group's own target alone), and a configuration
that cannot start is a row saying why while the rest of the race completes.

No real llama-server and no real model: GGUF files are tiny ones the test writes (for the KV
geometry) or sizes the test makes up, MemAvailable is a file the test writes, servers are
objects answering `complete` in process, and a server that fails to start is a real
`LlamaServer` around a shell script that exits as llama-server does when it cannot allocate.
"""

from __future__ import annotations

import math
import stat
from types import SimpleNamespace

import pytest

from polyplan.engines.llama_cpp.race import POLYPLAN, TARGET_ONLY, llama_peers_lines, peer_rows, race_servers, server_needs
from polyplan.engines.race import Contender, Timed
from polyplan.formats.race import Race
from polyplan.engines.llama_cpp.server import Completion, LlamaServer
from polyplan.engines.llama_cpp.race_memory import (MODEL_ALLOWANCE, MemoryNeed, ModelMemory, available_memory, gguf_memory, group_bytes,
                                          memory_line, race_groups, usable_memory)
from polyplan.formats.errors import PolyplanError
from polyplan.profiler.prompts import EncodedPrompt, Prompt

GiB = 2**30
TARGET = ModelMemory("/m/target.gguf", 4 * GiB, 100_000)  # a 7B-sized q4 target: 4 GiB, 100 kB of KV per token
DRAFT = ModelMemory("/m/draft.gguf", 1 * GiB, 20_000)
CONTEXT = 4096
CONFIGS = [Contender(TARGET_ONLY, ()),
           Contender("draft-simple d (defaults)", ("--spec-type", "draft-simple", "-md", "/m/draft.gguf")),
           Contender("draft-simple d K=3", ("--spec-type", "draft-simple", "-md", "/m/draft.gguf", "--spec-draft-n-max", "3"),
                     predicted_speedup=1.5, exported=True),
           Contender("ngram-simple (defaults)", ("--spec-type", "ngram-simple",)),
           Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod",))]
RESIDENT = MemoryNeed(POLYPLAN, 2 * GiB)


def needs(mapped: bool = False) -> list[MemoryNeed]:
    return server_needs(CONFIGS, TARGET, CONTEXT, mapped=mapped, memory=lambda path: DRAFT)


def prompts(count: int = 2) -> list[EncodedPrompt]:
    return [EncodedPrompt(Prompt(f"p{i}", "spec_bench:coding", f"q:{i}"), (1, 2, 3 + i)) for i in range(count)]


# ----------------------------------------------------------------------------- the estimate


def test_a_gguf_files_kv_cache_per_token_is_read_from_its_metadata(tmp_path):
    from tiny_gguf import write_tiny_gguf

    for per_layer in (False, True):  # head counts as numbers, or one per block
        path = tmp_path / f"tiny-{per_layer}.gguf"
        write_tiny_gguf(path, layers=3, per_layer_heads=per_layer)
        memory = gguf_memory(path)
        # 3 blocks x 2 KV heads x (K 8 + V 8 of head dim 32 / 4 heads) x f16
        assert memory.kv_bytes_per_token == 3 * 2 * (8 + 8) * 2
        assert memory.file_bytes == path.stat().st_size and memory.path == str(path.resolve())
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf")
    with pytest.raises(PolyplanError, match="broken.gguf: cannot read its GGUF header"):
        gguf_memory(broken)


def test_a_servers_need_is_its_files_its_kv_caches_and_an_allowance_per_model():
    loaded = []
    base, draft, _, ngram, _ = server_needs(CONFIGS, TARGET, CONTEXT, mapped=False, memory=lambda path: loaded.append(path) or DRAFT)
    assert loaded == ["/m/draft.gguf"]  # each draft file read once
    alone = TARGET.file_bytes + TARGET.kv_bytes_per_token * CONTEXT + MODEL_ALLOWANCE
    assert base.private_bytes == ngram.private_bytes == alone and base.mapped == ()
    assert draft.private_bytes == alone + DRAFT.file_bytes + DRAFT.kv_bytes_per_token * CONTEXT + MODEL_ALLOWANCE
    # weights llama.cpp maps from the file (--no-repack) are shared: a group counts each file once
    base, draft = needs(mapped=True)[:2]
    assert base.private_bytes == alone - TARGET.file_bytes
    assert group_bytes([base, draft]) == base.private_bytes + draft.private_bytes + TARGET.file_bytes + DRAFT.file_bytes
    assert group_bytes([base, base]) == 2 * base.private_bytes + TARGET.file_bytes


def test_available_memory_is_memavailable_less_a_margin(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n")
    assert available_memory(meminfo) == 20_000_000 * 1024
    assert usable_memory(meminfo) == int(20_000_000 * 1024 * 0.9)
    assert available_memory(tmp_path / "absent") > 0  # not Linux: psutil or os.sysconf


# ----------------------------------------------------------------------------- the groups


def test_everything_that_fits_races_in_one_group():
    plan = race_groups(needs()[0], needs()[1:], RESIDENT, 100 * GiB)
    assert plan.groups == (tuple(config.label for config in CONFIGS),) and plan.too_large == ()
    assert plan.needed == group_bytes([RESIDENT, *needs()]) and plan.needed < 100 * GiB
    line = memory_line(plan, len(CONFIGS))
    assert line.startswith("memory: 5 configurations need ") and line.endswith("racing them all at once")


def test_too_little_memory_races_in_groups_that_fit_each_with_the_target_alone():
    base, *others = needs()
    available = 16 * GiB  # the target alone ~4.6 GiB, a drafter's server ~5.9 GiB, polyplan 2 GiB: not all at once
    plan = race_groups(base, others, RESIDENT, available)
    assert len(plan.groups) > 1 and plan.too_large == ()
    assert all(group[0] == TARGET_ONLY for group in plan.groups)
    raced = [label for group in plan.groups for label in group[1:]]
    assert sorted(raced) == sorted(need.label for need in others)  # each configuration in exactly one group
    by_label = {need.label: need for need in needs()}
    assert all(group_bytes([RESIDENT, *(by_label[label] for label in group)]) <= available for group in plan.groups)
    assert plan.needed > available  # negative control: all at once would not fit
    line = memory_line(plan, len(CONFIGS))
    assert f"racing in {len(plan.groups)} groups, each with {TARGET_ONLY}" in line and "group 2: " in line


def test_a_configuration_too_large_even_beside_the_target_alone_is_left_out_and_says_so():
    base, *others = needs()
    available = 12 * GiB  # the target alone and polyplan fit (~6.6 GiB), one n-gram server (~4.6 GiB) beside them, no drafter's
    plan = race_groups(base, others, RESIDENT, available)
    assert [label for label, _ in plan.too_large] == ["draft-simple d (defaults)", "draft-simple d K=3"]
    assert plan.groups == ((TARGET_ONLY, "ngram-simple (defaults)"), (TARGET_ONLY, "ngram-mod (defaults)"))
    assert "too large even beside the target alone: draft-simple d (defaults), draft-simple d K=3" in memory_line(plan, 5)
    events = []
    servers = {label: FakeServer(label, events, 1.0) for label in (TARGET_ONLY, "ngram-simple (defaults)", "ngram-mod (defaults)")}
    runs, failures = race(plan.groups, servers, events, repeats=1)
    rows = peer_rows(CONFIGS, runs, failures, plan)
    assert [row.label for row in rows] == [config.label for config in CONFIGS] + [POLYPLAN]
    assert [row.group for row in rows] == [None, None, None, 1, 2, None]
    row = next(row for row in rows if row.label == "draft-simple d K=3")
    assert row.failure.startswith("not started: needs ") and "GB together with llama.cpp target only" in row.failure
    assert math.isnan(row.speedup) and row.runs == 0 and row.predicted_speedup == 1.5


def test_no_room_for_the_target_alone_is_one_line():
    with pytest.raises(PolyplanError, match="^memory: llama.cpp target only and polyplan plan need .* GB available"):
        race_groups(needs()[0], needs()[1:], RESIDENT, 4 * GiB)


# ----------------------------------------------------------------------------- the race


class FakeServer:
    """A started llama-server in process: `complete` answers at the call time it is given."""

    def __init__(self, label, events, seconds, fail_after=None):
        self.label, self.events, self.seconds, self.fail_after, self.calls = label, events, seconds, fail_after, 0

    def __enter__(self):
        self.events.append(("start", self.label))
        return self

    def __exit__(self, *exc):
        self.events.append(("stop", self.label))

    def complete(self, ids, n):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise PolyplanError("llama-server did not answer (connection refused; killed)")
        self.events.append(("call", self.label))
        seconds = self.seconds() if callable(self.seconds) else self.seconds
        return Completion(tuple(range(n)), n, 1000.0 * seconds, 1.0, 0, 0, seconds)


def race(groups, servers, events, *, repeats=2, ours_seconds=0.5):
    """`race_servers` over fake servers (label -> a server, or an exception to raise at start)."""

    def start(config):
        made = servers[config.label]
        if isinstance(made, Exception):
            raise made
        return made

    def ours(ids):
        events.append(("call", POLYPLAN))
        return Timed(tuple(range(4)), ours_seconds, drafted=8, accepted=6)

    by_label = {config.label: config for config in CONFIGS}
    return race_servers([[by_label[label] for label in group] for group in groups], start, ours, prompts(), repeats=repeats,
                        new_tokens=4)


def test_groups_race_one_after_another_interleaved_within_and_paired_with_their_own_target_alone():
    events = []

    def target_seconds():  # the machine is twice as slow once group 1 is over
        return 2.0 if ("stop", TARGET_ONLY) in events else 1.0

    servers = {TARGET_ONLY: FakeServer(TARGET_ONLY, events, target_seconds),
               "ngram-simple (defaults)": FakeServer("ngram-simple (defaults)", events, 0.5),
               "ngram-mod (defaults)": FakeServer("ngram-mod (defaults)", events, 1.0)}
    groups = [(TARGET_ONLY, "ngram-simple (defaults)"), (TARGET_ONLY, "ngram-mod (defaults)")]
    runs, failures = race(groups, servers, events)
    assert failures == {}
    # group 1's servers stop before group 2's start: never both groups in memory
    starts = [i for i, e in enumerate(events) if e == ("start", "ngram-mod (defaults)")]
    stops = [i for i, e in enumerate(events) if e == ("stop", "ngram-simple (defaults)")]
    assert stops[0] < starts[0]
    # within a group every configuration answers each (repeat, prompt) once, the order rotated
    for group in (0, 1):
        mine = [run for run in runs if run.group == group]
        labels = {run.label for run in mine}
        assert labels == {TARGET_ONLY, groups[group][1], POLYPLAN}
        assert len(mine) == 3 * 2 * 2  # 3 racers x 2 prompts x 2 repeats
    calls = [label for kind, label in events if kind == "call"]
    firsts = [calls[i] for i in range(0, 12, 3)]  # group 1: who goes first at each (repeat, prompt)
    assert len(set(firsts)) == 3
    # each row's ratio is over its own group's target alone (1 s in group 1, 2 s in group 2)
    plan = SimpleNamespace(groups=tuple(groups), too_large=(), available=0)
    rows = {row.label: row for row in peer_rows(CONFIGS[:1] + CONFIGS[3:], runs, failures, plan)}
    assert rows["ngram-simple (defaults)"].speedup == pytest.approx(2.0) and rows["ngram-simple (defaults)"].group == 1
    assert rows["ngram-mod (defaults)"].speedup == pytest.approx(2.0) and rows["ngram-mod (defaults)"].group == 2
    # polyplan raced in both groups: 0.5 s against 1 s, then against 2 s
    assert rows[POLYPLAN].runs == 8 and rows[POLYPLAN].speedup == pytest.approx((2.0 + 4.0) / 2)
    assert rows[TARGET_ONLY].speedup == pytest.approx(1.0) and rows[TARGET_ONLY].group is None


def test_a_server_that_fails_to_start_is_a_row_with_its_reason_and_the_race_completes(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'loading model'\necho 'error: failed to allocate CPU buffer of size 9000000000' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    events = []
    servers = {TARGET_ONLY: FakeServer(TARGET_ONLY, events, 1.0),
               "draft-simple d K=3": LlamaServer(fake, tmp_path / "m.gguf", (), tmp_path / "server.log", start_timeout_s=10),
               "ngram-simple (defaults)": FakeServer("ngram-simple (defaults)", events, 0.5),
               "ngram-mod (defaults)": FakeServer("ngram-mod (defaults)", events, 0.8, fail_after=1)}
    groups = [(TARGET_ONLY, "draft-simple d K=3", "ngram-simple (defaults)", "ngram-mod (defaults)")]
    runs, failures = race(groups, servers, events)
    assert failures["draft-simple d K=3"].startswith(
        "failed to start: llama-server exited at start (error: failed to allocate CPU buffer of size 9000000000)")
    assert failures["ngram-mod (defaults)"].startswith("stopped answering: llama-server did not answer")
    assert {run.label for run in runs} == {TARGET_ONLY, "ngram-simple (defaults)", POLYPLAN}  # a failed one keeps no runs
    plan = SimpleNamespace(groups=tuple(groups), too_large=(), available=0)
    rows = peer_rows([CONFIGS[0], CONFIGS[2], CONFIGS[3], CONFIGS[4]], runs, failures, plan)
    assert [row.label for row in rows] == [TARGET_ONLY, "draft-simple d K=3", "ngram-simple (defaults)", "ngram-mod (defaults)",
                                           POLYPLAN]  # the table keeps its shape
    assert rows[2].speedup == pytest.approx(2.0) and rows[2].runs == 4
    bench = Race("llama.cpp", rows, 2, 4, 2, 1, notes=(("memory", "memory: 4 configurations need 1.0 GB"),))
    text = "\n".join(llama_peers_lines(bench))
    assert "memory: 4 configurations need 1.0 GB" in text
    assert any(line.startswith("draft-simple d K=3") and "failed to start: llama-server exited at start" in line
               for line in text.splitlines())


def test_a_target_alone_that_cannot_start_is_one_line():
    events = []
    servers = {TARGET_ONLY: PolyplanError("llama-server exited at start (error: unknown model architecture)"),
               "ngram-simple (defaults)": FakeServer("ngram-simple (defaults)", events, 0.5)}
    with pytest.raises(PolyplanError, match="llama.cpp target only failed to start, so nothing has a baseline: .*architecture"):
        race([(TARGET_ONLY, "ngram-simple (defaults)")], servers, events)
    assert events == []  # started first, so nothing else started


def test_with_every_server_in_one_group_nothing_changes_for_a_race_that_fits():
    events = []
    servers = {label: FakeServer(label, events, seconds)
               for label, seconds in ((TARGET_ONLY, 1.0), ("ngram-simple (defaults)", 0.5), ("ngram-mod (defaults)", 0.25))}
    runs, failures = race([(TARGET_ONLY, "ngram-simple (defaults)", "ngram-mod (defaults)")], servers, events, repeats=1)
    assert failures == {} and {run.group for run in runs} == {0}
    assert [kind for kind, _ in events[:3]] == ["start"] * 3 and [kind for kind, _ in events[-3:]] == ["stop"] * 3
    plan = SimpleNamespace(groups=((TARGET_ONLY, "ngram-simple (defaults)", "ngram-mod (defaults)"),), too_large=(), available=0)
    rows = {row.label: row for row in peer_rows(CONFIGS[:1] + CONFIGS[3:], runs, failures, plan)}
    assert rows["ngram-mod (defaults)"].speedup == pytest.approx(4.0) and rows[POLYPLAN].speedup == pytest.approx(2.0)


def test_polyplans_own_members_are_estimated_as_they_stay_resident(tmp_path):
    import torch

    from polyplan.engines.llama_cpp.race_memory import resident_need
    from tiny_gguf import write_tiny_gguf

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    shared = torch.nn.Linear(100, 10)  # 1010 float32 values
    items = [SimpleNamespace(member=SimpleNamespace(path=path), candidate=SimpleNamespace(context=512)),
             SimpleNamespace(member=SimpleNamespace(model=torch.nn.Sequential(shared)), candidate=SimpleNamespace(context=None)),
             SimpleNamespace(member=SimpleNamespace(model=torch.nn.Sequential(shared)), candidate=SimpleNamespace(context=None)),
             SimpleNamespace(member=SimpleNamespace(), candidate=SimpleNamespace(context=None))]  # an n-gram drafter
    need = resident_need(POLYPLAN, SimpleNamespace(candidates=items), mapped=True)
    memory = gguf_memory(path)
    assert need.private_bytes == memory.kv_bytes_per_token * 512 + MODEL_ALLOWANCE + 1010 * 4  # shared weights once
    assert need.mapped == ((memory.path, memory.file_bytes),)
