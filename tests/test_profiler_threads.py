"""One thread default for every command that times: --threads, else as measured, else the free cores."""

from __future__ import annotations

import inspect

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.profiler import threads as threads_module
from polyplan.profiler.threads import choose_threads, free_cores, machine_threads, plan_threads


def test_free_cores_leave_the_busy_ones_to_the_load():
    assert free_cores(2, 0.1) == 1  # idle: every core but one (kept for the OS and a load yet to come)
    assert free_cores(16, 0.0) == 15
    assert free_cores(16, 0.6) == 15  # one bursty process (busy 60% of the minute) takes the spare core
    assert free_cores(16, 3.4) == 13  # three busy cores
    assert free_cores(2, 7.0) == 1  # never below one
    assert free_cores(1, 0.0) == 1
    assert free_cores(8, None) == 7  # no load average (some OSes): every core but one
    assert free_cores(8, 0.0, reserved=2) == 5  # a load the command starts itself


def test_the_choice_order_is_option_then_recorded_then_machine(monkeypatch):
    monkeypatch.setattr(threads_module, "available_cpus", lambda: 8)
    monkeypatch.setattr(threads_module, "machine_load", lambda: 2.2)
    assert choose_threads(3, 1).threads == 3 and choose_threads(3, 1).source == "--threads"
    recorded = choose_threads(None, 1, recorded_by="the plan's profile")
    assert recorded.threads == 1 and "the plan's profile" in recorded.line
    machine = choose_threads(None)
    assert machine.threads == 6 and "load average 2.20" in machine.line and "8 cores" in machine.line
    assert machine_threads(reserved=2).threads == 4
    monkeypatch.setattr(threads_module, "machine_load", lambda: 0.0)
    assert choose_threads(None).threads == 7  # idle: one core kept
    with pytest.raises(PolyplanError, match="--threads: must be >= 1"):
        choose_threads(0)


def test_plan_threads_reads_the_device_label():
    assert plan_threads("cpu AMD EPYC (2 threads)") == 2
    assert plan_threads("cpu x (1 thread)") == 1
    assert plan_threads("cuda:0 NVIDIA H100") is None


def test_every_timing_command_defaults_to_the_same_choice():
    """The question "how many threads?" never gets two defaults: each command that times leaves
    --threads unset (None), and so goes to `choose_threads` (profile's 0 still means torch's choice)."""
    from polyplan.cli.commands import bench, demo, generate, profile, recommend, validate

    commands = {"profile": profile.profile, "recommend": recommend.recommend, "validate": validate.validate,
                "demo": demo.demo, "bench decoder": bench.decoder, "bench peers": bench.peers, "bench loop": bench.loop,
                "generate": generate.generate}
    for name, command in commands.items():
        default = inspect.signature(command).parameters["threads"].default
        assert default is None, f"{name} --threads defaults to {default!r}"


def _stat(busy: dict[int, int]):
    """/proc/stat readings: each CPU's busy jiffies advance by busy[cpu] of 100 between reads."""
    reads = iter([{cpu: (0, 0) for cpu in busy}, {cpu: (b, 100) for cpu, b in busy.items()}])
    return lambda: next(reads)


def test_a_pinned_process_counts_only_the_work_on_its_own_cores(monkeypatch):
    """Pinned to CPU 0 of 2 while CPU 1 is busy: the load average says 2.1, yet nothing competes
    for CPU 0; the load is this process alone. Control: work on CPU 0 itself does count."""
    monkeypatch.setattr(threads_module.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads_module, "_affinity", lambda: {0})
    monkeypatch.setattr(threads_module.os, "getloadavg", lambda: (2.1, 2.0, 2.0))
    monkeypatch.setattr(threads_module.time, "sleep", lambda s: None)
    monkeypatch.setattr(threads_module, "_cpu_times", _stat({0: 2, 1: 100}))
    assert threads_module.machine_load() == pytest.approx(1.02)
    monkeypatch.setattr(threads_module, "_cpu_times", _stat({0: 90, 1: 100}))
    assert threads_module.machine_load() == pytest.approx(1.9)
    monkeypatch.setattr(threads_module, "_affinity", lambda: {0, 1})  # every core: the load average
    assert threads_module.machine_load() == 2.1
    monkeypatch.setattr(threads_module, "_affinity", lambda: {0})
    monkeypatch.setattr(threads_module, "_cpu_times", lambda: None)  # no /proc/stat: the load average
    assert threads_module.machine_load() == 2.1
