"""The processor a profile was timed on (`formats.processor`, issue 33): it round-trips through
profile.json and plan.json, files from before it still load, and the one line that says a
plan's timings come from another processor appears only when they do (fake records, never the
real machine)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import decode_plan, read_plan
from polyplan.formats.codec import decode, encode
from polyplan.formats.processor import Processor, isa_flags, machine_difference, processor_line
from polyplan.formats.profile import decode_profile, encode_profile, read_profile
from polyplan.planner.plan_builder import plan_from_profile

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"
EPYC = Processor("AMD EPYC 9R14", "x86_64", ("avx2", "avx512_bf16", "avx512f", "fma"), "x86", "AVX512", 2)
XEON = Processor("Intel(R) Xeon(R) Processor", "x86_64", ("amx_tile", "avx2", "avx512f", "fma"), "x86", "AVX512", 2)


def test_the_record_round_trips_through_its_json():
    assert decode(Processor, json.loads(json.dumps(encode(EPYC))), "processor") == EPYC
    gpu = Processor("AMD EPYC 9R14", gpu="NVIDIA H100 80GB HBM3")
    assert decode(Processor, encode(gpu), "processor") == gpu
    assert list(encode(gpu)) == ["name", "architecture", "flags", "quantized_engine", "capability", "cores", "gpu"]  # null kept
    assert decode(Processor, {"name": "x", "flags": ["fma", "avx2", "fma"]}).flags == ("avx2", "fma")  # sorted, once each
    assert gpu.label == "NVIDIA H100 80GB HBM3 on AMD EPYC 9R14 (unknown ISA, unknown engine)"


def test_the_recorded_flags_are_a_sorted_subset():
    assert isa_flags(["sse2", "fma", "avx512f", "amx_tile", "pni", "avx2"]) == ("amx_tile", "avx2", "avx512f", "fma")
    assert isa_flags(["fp", "asimd", "sve", "aes"]) == ("asimd", "sve")
    assert EPYC.label == "AMD EPYC 9R14 (avx512, x86)" and XEON.label == "Intel(R) Xeon(R) Processor (amx, x86)"
    assert Processor("Neoverse-V1", "aarch64", ("asimd",), "qnnpack").label == "Neoverse-V1 (neon, qnnpack)"


@pytest.mark.parametrize(
    "value, message",
    [
        ("AMD", "processor: must be a JSON object"),
        ({"flags": []}, "processor.name: missing"),
        ({"name": " "}, "processor.name: must be a non-empty string"),
        ({"name": "x", "flags": "avx2"}, "processor.flags: must be a JSON array"),
        ({"name": "x", "flags": [""]}, r"processor.flags\[0\]: must be a non-empty string"),
        ({"name": "x", "cores": 0}, "processor.cores: must be an integer >= 1"),
        ({"name": "x", "speed": 3}, "processor.speed: unknown field"),
    ],
)
def test_a_bad_record_is_one_line_naming_the_field(value, message):
    with pytest.raises(PolyplanError, match=message):
        decode(Processor, value, "JSON", "processor")


def test_the_profile_keeps_it_and_an_old_profile_loads_without_it(tmp_path):
    old = read_profile(EXAMPLE)  # shipped before processors were recorded
    assert old.processor is None and "processor" not in encode_profile(old)
    old = dataclasses.replace(old, processor=EPYC)
    payload = json.loads(json.dumps(encode_profile(old)))
    assert list(payload)[:4] == ["schema_version", "target", "device", "processor"]  # beside the device label
    assert decode_profile(payload).processor == EPYC
    payload["processor"]["flags"] = 3
    with pytest.raises(PolyplanError, match=r"profile: processor.flags: must be a JSON array"):
        decode_profile(payload)


def test_the_plan_carries_the_profiles_and_an_old_plan_loads_without_it(tmp_path):
    profile = dataclasses.replace(read_profile(EXAMPLE), processor=EPYC)
    plan_from_profile(profile, tmp_path / "plan.json", profile_path=str(EXAMPLE), resamples=0)
    assert read_plan(tmp_path / "plan.json").processor == EPYC
    payload = json.loads((tmp_path / "plan.json").read_text())
    del payload["processor"]  # a plan from before it was recorded
    assert decode_plan(payload).processor is None
    plan_from_profile(read_profile(EXAMPLE), tmp_path / "none.json", profile_path=str(EXAMPLE), resamples=0)
    assert read_plan(tmp_path / "none.json").processor is None  # a profile without one: null in the plan


def test_another_processor_is_one_line_naming_both():
    line = machine_difference("cpu AMD EPYC 9R14 (2 threads)", EPYC, "cpu Intel(R) Xeon(R) Processor (2 threads)", XEON)
    assert line == ("the plan was profiled on 'AMD EPYC 9R14 (avx512, x86)' but this is 'Intel(R) Xeon(R) Processor (amx, x86)': "
                    "its timings may not hold; re-run polyplan profile here")
    engine = Processor(EPYC.name, EPYC.architecture, EPYC.flags, "onednn", EPYC.capability, EPYC.cores)
    assert "(avx512, onednn)" in processor_line(EPYC, engine)  # another quantized engine is another processor


def test_a_shared_model_name_is_told_apart_by_its_flags():
    older = Processor(XEON.name, "x86_64", ("avx2", "avx512f", "fma"), "x86")
    newer = Processor(XEON.name, "x86_64", ("avx2", "avx512_bf16", "avx512f", "fma"), "x86")
    assert processor_line(older, newer) == (
        "the plan was profiled on 'Intel(R) Xeon(R) Processor (avx512, x86) without avx512_bf16' but this is "
        "'Intel(R) Xeon(R) Processor (avx512, x86) with avx512_bf16': its timings may not hold; re-run polyplan profile here"
    )


def test_one_model_name_and_flags_of_two_generations_are_told_apart_by_the_generation():
    zen4 = dataclasses.replace(EPYC, generation="family 25 model 17")
    zen5 = dataclasses.replace(EPYC, generation="family 26 model 2")
    assert processor_line(zen4, zen5) == (
        "the plan was profiled on 'AMD EPYC 9R14 (avx512, x86) family 25 model 17' but this is "
        "'AMD EPYC 9R14 (avx512, x86) family 26 model 2': its timings may not hold; re-run polyplan profile here"
    )
    assert processor_line(zen5, dataclasses.replace(EPYC, generation="family 26 model 2")) is None  # control: the same
    assert processor_line(EPYC, zen5) is None  # a record from before the generation was kept: nothing to compare
    assert "generation" not in encode(EPYC) and encode(zen5)["generation"] == "family 26 model 2"  # old files re-encode as they were
    assert decode(Processor, encode(zen5), "processor") == zen5


def test_no_line_when_nothing_differs_or_nothing_is_recorded():
    label = "cpu AMD EPYC 9R14 (2 threads)"
    more_cores = Processor(EPYC.name, EPYC.architecture, EPYC.flags, EPYC.quantized_engine, EPYC.capability, 64)
    assert machine_difference(label, EPYC, label, more_cores) is None  # negative control: the cores are not compared
    assert machine_difference(label, None, label, XEON) is None  # an old plan on the same label: nothing to say
    assert machine_difference("", None, label, XEON) is None  # nothing recorded at all
    assert machine_difference(label, EPYC, None, EPYC) is None
    # an old plan is still compared by its device label (which names the CPU model), once
    assert machine_difference(label, None, "cpu AMD EPYC 9R14 (1 thread)", XEON) == (
        "the plan was profiled on 'cpu AMD EPYC 9R14 (2 threads)' but this runs on 'cpu AMD EPYC 9R14 (1 thread)'"
    )
    # the processor's line wins over the label's: one line, not two
    assert machine_difference(label, EPYC, "cpu Intel (1 thread)", XEON).startswith("the plan was profiled on 'AMD EPYC 9R14 (avx512")
