"""Timing warnings (planner.intervals.timing_health), the outlier rule (profiler.stats) and the bounded
load generator (pipeline.load)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.intervals.timing_health import timing_warnings
from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile, TimingHealth
from polyplan.profiler.stats import outlier_mask, robust_spread


def _profile(**metas) -> Profile:
    """Each model's timing health given as the fields of `TimingHealth` ({}: none recorded)."""
    models = tuple(ModelProfile(name, f"fp-{name}", (LatencyPoint(128, 1, 0.01),), timing=TimingHealth(**meta) if meta else None)
                   for name, meta in metas.items())
    return Profile(target="target", device="cpu", models=models, pairs=())


QUIET = {"reference_median_s": 0.001, "reference_relative_iqr": 0.03, "latency_outliers": 0, "latency_timings": 40,
         "threads": 1, "cpus": 2}


def test_a_quiet_profile_has_no_warning():
    assert timing_warnings(_profile(target=QUIET, drafter=QUIET)) == ()
    assert timing_warnings(_profile(target={}, drafter={})) == ()  # older profiles record nothing


@pytest.mark.parametrize("threads", [2, 4])
def test_threads_claiming_every_core_are_warned_about(threads):
    """The issue's case: 2 threads on a loaded 2-core machine timed T(1) at 193 ms against 9.5 ms."""
    lines = timing_warnings(_profile(target={**QUIET, "threads": threads, "cpus": 2}, drafter=QUIET))
    assert len(lines) == 1 and f"target was timed with {threads} threads on 2 available core(s)" in lines[0]
    assert "--threads 1" in lines[0]
    assert timing_warnings(_profile(target={**QUIET, "threads": 2, "cpus": 8}, drafter=QUIET)) == ()  # room to spare


def test_an_overloaded_machine_is_warned_about():
    lines = timing_warnings(_profile(target={**QUIET, "load_average": 3.5}, drafter=QUIET))
    assert len(lines) == 1 and "load 3.5 on 2 core(s)" in lines[0]
    both = timing_warnings(_profile(target={**QUIET, "load_average": 3.5}, drafter={**QUIET, "load_average": 3.5}))
    assert len(both) == 1 and "while target and drafter were timed" in both[0]  # one line for a machine-wide reason


@pytest.mark.parametrize(
    ("meta", "words"),
    [
        ({**QUIET, "reference_relative_iqr": 0.4}, "machine floor was noisy"),
        ({**QUIET, "noise_budget_exhausted": True}, "budget"),
        ({**QUIET, "latency_outliers": 9, "latency_timings": 40}, "target 9 of 40"),
        ({**QUIET, "reference_median_s": 0.003}, "3.0x slower while target was timed"),
    ],
)
def test_each_rule_names_the_model_and_the_reason(meta, words):
    lines = timing_warnings(_profile(target=meta, drafter=QUIET))
    assert len(lines) == 1 and words in lines[0]


def test_a_noisy_floor_on_three_models_is_one_line_naming_them_all():
    """The floor is the machine's: one finding, said once, with the spread of what each model saw."""
    noisy = {**QUIET, "reference_relative_iqr": 0.22}
    lines = timing_warnings(_profile(target=noisy, **{"target-int8": {**noisy, "reference_relative_iqr": 0.34}},
                                     drafter={**noisy, "reference_relative_iqr": 0.3}, ngram=QUIET))
    assert len(lines) == 1
    assert "while target, target-int8 and drafter were timed" in lines[0] and "22.0%-34.0%" in lines[0]
    assert "ngram" not in lines[0] and "their latency curves are uncertain" in lines[0]


def test_two_reasons_on_several_models_are_two_lines():
    bad = {**QUIET, "reference_relative_iqr": 0.3, "noise_budget_exhausted": True}
    lines = timing_warnings(_profile(target=bad, drafter=bad, ngram=bad))
    assert len(lines) == 2
    assert [("IQR/median" in line, "budget" in line) for line in lines] == [(True, False), (False, True)]
    assert all("target, drafter and ngram were timed" in line for line in lines)


def test_the_thread_warning_names_every_member_without_calling_the_threads_torch_s():
    """llama.cpp members follow the one thread setting (their OpenMP region waits for its slowest
    thread as torch's does), so a member of either engine is named, and the line says threads."""
    two = {**QUIET, "threads": 2, "cpus": 2}
    lines = timing_warnings(_profile(target=two, **{"qwen-0.5b-gguf": two}))
    assert len(lines) == 1 and lines[0].startswith("target and qwen-0.5b-gguf were timed with 2 threads")
    assert "torch" not in lines[0]


def test_tukey_fences_flag_far_outliers_only():
    """n = 1000 Gaussian timings (mean 10 ms, sd 0.1 ms): the far-out fences (3 IQR) flag none
    (P(|z| > 4.7) ~ 3e-6 each); 5 passes slowed 3x are all flagged; fewer than 4 samples: none."""
    rng = np.random.default_rng(0)
    clean = 0.010 + 0.0001 * rng.standard_normal(1000)
    assert not outlier_mask(clean).any()
    disturbed = np.concatenate([clean, [0.03] * 5])
    assert outlier_mask(disturbed).sum() == 5
    summary = robust_spread(disturbed)
    assert summary.outliers == 5 and summary.repeats == 1000 and len(summary.kept) == 1000
    assert summary.median == pytest.approx(np.median(clean))
    assert not outlier_mask([0.01, 0.01, 0.5]).any()


def test_load_runs_for_its_time_limit_and_reports_what_it_did():
    from polyplan.pipeline.load import run_load_processes

    (report,) = run_load_processes(0.3)
    assert report.products > 0 and report.seconds >= 0.3


def test_load_stops_at_the_end_of_its_block():
    from polyplan.pipeline.load import background_load

    with background_load(600.0) as running:
        time.sleep(0.5)
    assert all(process.returncode is not None for process in running.processes)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to see whether the load process is gone")
def test_load_never_outlives_its_parent():
    """A parent starts a 600 s load and dies at once without cleaning up; the load notices and
    exits (polled for up to 30 s; it checks between products, every few milliseconds)."""
    script = (
        "import os, subprocess, sys\n"
        "from polyplan.pipeline import load\n"
        "child = subprocess.Popen([sys.executable, load.__file__, '--seconds', '600', '--parent', str(os.getpid())],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.1)
    assert not _running(pid)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as status:
            return status.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_load_settings_are_one_clear_error():
    from polyplan.pipeline.load import background_load, check_seconds

    with pytest.raises(PolyplanError, match="--seconds"):
        check_seconds(0)
    with pytest.raises(PolyplanError, match="--cores"):
        with background_load(1.0, cores=(os.cpu_count() or 1) + 1):
            pass
