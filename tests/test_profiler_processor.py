"""Probing this machine's processor (`profiler.processor`) and re-timing a profile measured on
another (`profiler.profile_cache.retimed_here`): what the profile records and what a run here
keeps of one made elsewhere."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from polyplan.formats.processor import ISA_FLAGS, Processor
from polyplan.formats.profile import LoopCalibration, SwitchCosts, TimingHealth, read_profile
from polyplan.profiler.processor import cpu_generation, cpuinfo_fields, this_processor
from polyplan.profiler.profile_cache import retimed_here

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"
X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512_bf16 pni

processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2
"""
ARM = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes sve i8mm bf16
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


def test_the_first_processors_name_and_flags_are_read(tmp_path):
    (tmp_path / "x86").write_text(X86)
    (tmp_path / "arm").write_text(ARM)
    assert cpuinfo_fields(str(tmp_path / "x86")) == ("AMD EPYC 9R14", ("fpu", "sse2", "avx", "fma", "avx2", "avx512f", "avx512_bf16", "pni"))
    assert cpuinfo_fields(str(tmp_path / "arm")) == (None, ("fp", "asimd", "evtstrm", "aes", "sve", "i8mm", "bf16"))
    assert cpuinfo_fields(str(tmp_path / "missing")) == (None, ())
    assert cpu_generation(str(tmp_path / "x86")) == "family 26 model 2"
    assert cpu_generation(str(tmp_path / "arm")) == "implementer 0x41 part 0xd40"
    assert cpu_generation(str(tmp_path / "missing")) is None


def test_this_processor_records_torchs_view_and_a_subset_of_flags():
    here = this_processor("cpu")
    assert here.name and here.gpu is None and here.cores >= 1
    assert set(here.flags) <= ISA_FLAGS and list(here.flags) == sorted(here.flags)
    assert here.quantized_engine == torch.backends.quantized.engine
    assert not here.differs(this_processor("cpu"))  # probing twice finds the same processor


def test_a_profile_from_elsewhere_keeps_its_acceptance_and_loses_its_timings():
    elsewhere = read_profile(EXAMPLE)
    elsewhere = dataclasses.replace(
        elsewhere, processor=Processor("AMD EPYC 9R14", flags=("avx512f",)), loop_overhead={"greedy": LoopCalibration(1e-4, 3e-4)},
        switch_costs=SwitchCosts({"eagle": (2e-4,)}),
        models=tuple(dataclasses.replace(model, latency_fingerprint="sha256:timed-there", timing=TimingHealth(threads=2))
                     for model in elsewhere.models),
    )
    here = Processor("Intel(R) Xeon(R) Processor", flags=("amx_tile",))
    keep = {name: elsewhere.model(name).fingerprint for name in ("vicuna-7b", "eagle")}
    copy = retimed_here(elsewhere, "cpu Intel(R) Xeon(R) Processor (1 thread)", here, keep)
    assert copy.device == "cpu Intel(R) Xeon(R) Processor (1 thread)" and copy.processor == here
    assert copy.model_names() == ["vicuna-7b", "eagle"]  # a model this run cannot re-time is left out
    assert all(model.latency_fingerprint is None and model.timing is None for model in copy.models)
    assert not copy.loop_overhead and copy.switch_costs is None and not copy.engine_overhead
    assert {(p.verifier, p.drafter) for p in copy.pairs} == {("vicuna-7b", "eagle")}
    kept = copy.pair("vicuna-7b", "eagle").sampling
    assert kept == elsewhere.pair("vicuna-7b", "eagle").sampling  # acceptance does not depend on the processor
    # negative control: the profile it was copied from is untouched
    assert elsewhere.models[0].latency_fingerprint == "sha256:timed-there" and elsewhere.loop_overhead


def test_export_and_bench_warn_in_one_line_on_stderr(tmp_path, monkeypatch, capsys):
    """`cli.support.warn_other_processor` (what export and bench peers call) on fake records."""
    from polyplan.cli.support import warn_other_processor
    from polyplan.planner.plan_builder import plan_from_profile

    profile = dataclasses.replace(read_profile(EXAMPLE), processor=Processor("AMD EPYC 9R14", flags=("avx512f",), quantized_engine="x86"))
    plan_from_profile(profile, tmp_path / "plan.json", profile_path=str(EXAMPLE), resamples=0)
    for here, lines in ((profile.processor, 0), (Processor("Intel Xeon", flags=("amx_tile",), quantized_engine="x86"), 1)):
        monkeypatch.setattr("polyplan.profiler.processor.this_processor", lambda device="cpu", here=here: here)
        warn_other_processor(tmp_path / "plan.json")
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == lines
    assert captured.err.startswith("warning: the plan was profiled on 'AMD EPYC 9R14 (avx512, x86)' but this is 'Intel Xeon (amx, x86)'")
