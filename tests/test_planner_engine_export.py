"""planner.engine_export and `polyplan export`: engine acceptance rules, loadability, the best
engine-expressible chain, and one clear line for every bad input. No models run here except
the engine-rate check on hand-made distributions."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from polyplan.formats.candidates import Candidate, parse_candidates
from polyplan.cli.app import app
from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.engines.export import config_text, engine_config, export_lines, export_to_json
from polyplan.planner.engine_export import export_plan, loadable
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.formats.plan import read_plan
from polyplan.formats.plan import write_plan
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import SearchSettings, rank_chains
from polyplan.formats.profile import (
    LatencyPoint, ModelProfile, Profile, SamplingStats, decode_profile, encode_profile, write_profile,
)
from polyplan.models.fingerprints import candidate_fingerprints
from polyplan.profiler.acceptance import TeacherForced, pair_alpha

YAML = {
    "candidates": [
        {"name": "target", "source": "./target", "target": True},
        {"name": "draft", "source": "./draft"},
        {"name": "target-int8", "derive": {"from": "target", "quantize": "int8"}},
        {"name": "target-exit2", "derive": {"from": "target", "layers": 2}},
        {"name": "ngram", "derive": {"kind": "ngram", "max_n": 4, "min_n": 2}},
    ]
}
TIMES = {"target": 0.1, "target-int8": 0.05, "target-exit2": 0.03, "draft": 0.01, "ngram": 0.0005}
# (alpha under the full rule, alpha under the engines' argmax rule) at t1.0
ALPHAS = {"target-int8": (0.95, 0.9), "target-exit2": (0.8, 0.7), "draft": (0.8, 0.3), "ngram": (0.4, 0.4)}


def _profile(engine_rate: bool = True) -> Profile:
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(64, k, seconds * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8)))
                   for name, seconds in TIMES.items())
    profile = Profile(target="target", device="synthetic", models=models, pairs=())
    for name, (full, argmax) in ALPHAS.items():
        profile = profile.with_stats("target", name, "t1.0", SamplingStats(alpha=full, engine_alpha=argmax if engine_rate else None))
    return profile


@pytest.fixture()
def files(tmp_path) -> tuple[Path, Path]:
    for folder in ("target", "draft"):
        (tmp_path / folder).mkdir()
    profile = _profile()
    prints = candidate_fingerprints(_candidates(tmp_path))  # as `recommend --candidates` records them
    profile = dataclasses.replace(profile, models=tuple(dataclasses.replace(model, fingerprint=prints[model.name]) for model in profile.models))
    result = rank_chains(profile, SearchSettings(sampling="t1.0", max_levels=2, k_max=8))
    plan = tmp_path / "plan.json"
    write_plan(plan_of(result, profile_path=str(tmp_path / "profile.json"),
                       candidates={"path": str(tmp_path / "models.yaml"), "yaml": YAML}), plan)
    write_profile(profile, tmp_path / "profile.json")
    return plan, tmp_path


def _candidates(root: Path):
    return parse_candidates(YAML, base_dir=root, origin="models.yaml")


def test_engine_rate_is_the_verifiers_probability_of_the_drafters_argmax():
    q = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])  # verifier, (L=2, V=3)
    p = torch.tensor([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])  # drafter: argmax 1, then 2
    estimate = pair_alpha(TeacherForced(None, (q,)), TeacherForced(None, (p,)), resamples=20, rng=np.random.default_rng(0))
    assert estimate.raw_alpha == pytest.approx(((0.2 + 0.3 + 0.1) + (0.1 + 0.1 + 0.6)) / 2)
    assert estimate.engine.raw_alpha == pytest.approx((0.3 + 0.6) / 2)  # q(argmax p) per position
    # greedy: both rules are argmax agreement
    greedy = pair_alpha(TeacherForced((torch.tensor([1, 2]),), None), TeacherForced((torch.tensor([1, 0]),), None),
                        resamples=20, rng=np.random.default_rng(0))
    assert greedy.engine.raw_alpha == greedy.raw_alpha == 0.5


def test_old_profiles_without_the_engine_rate_still_load():
    payload = encode_profile(_profile(engine_rate=False))
    assert "engine_alpha" not in payload["pairs"][0]["sampling"]["t1.0"]
    assert decode_profile(payload).pairs[0].sampling["t1.0"].engine_alpha is None
    fresh = decode_profile(encode_profile(_profile()))
    assert fresh.stats("target", "draft", "t1.0").engine_alpha == 0.3


@pytest.mark.parametrize(
    ("engine", "name", "method", "why"),
    [
        ("hf", "draft", "draft_model", None),
        ("vllm", "draft", "draft_model", None),
        ("llama.cpp", "draft", "", "not a GGUF file"),
        ("llama.cpp", "draft-gguf", "draft_model", None),
        ("vllm", "draft-gguf", "", "is a GGUF file"),
        ("hf", "target-int8", "", "quantizes to int8 in torch"),
        ("vllm", "target-exit2", "", "early-exit copy"),
        ("llama.cpp", "ngram", "ngram", None),
    ],
)
def test_loadability(tmp_path, engine, name, method, why):
    (tmp_path / "target").mkdir(), (tmp_path / "draft").mkdir()
    gguf = Candidate("draft-gguf", str(tmp_path / "d.gguf"), "gguf", None, False, "float32", "cpu", False)
    candidate = gguf if name == "draft-gguf" else _candidates(tmp_path).by_name(name)
    got_method, _, reason = loadable(engine, candidate)
    assert got_method == method
    assert (reason is None) if why is None else (why in reason)


def test_export_picks_the_best_drafter_under_each_engines_rule(files):
    plan, root = files
    profile, candidates = _profile(), _candidates(root)
    hf = export_plan(read_plan(plan), profile, candidates, "hf")
    vllm = export_plan(read_plan(plan), profile, candidates, "vllm")
    # HF assisted generation samples the draft: the full rule, where the draft model wins.
    assert hf.chosen.drafter == "draft" and hf.chosen.alpha == 0.8
    # vLLM's argmax rule cuts the draft model to 0.3: the cheaper n-gram lookup wins.
    assert vllm.chosen.drafter == "ngram" and vllm.chosen.alpha == 0.4
    draft_vllm = next(o for o in vllm.options if o.drafter == "draft")
    assert draft_vllm.alpha == 0.3 and draft_vllm.speedup < hf.chosen.speedup
    # the chosen K is the exact model's best one under that alpha
    curves = [curve_from_profile(profile.model("target")), curve_from_profile(profile.model("draft"))]
    best = max(range(1, 9), key=lambda k: predict_chain([0.8], curves, [k]).speedup)
    assert hf.chosen.block_size == best
    assert hf.chosen.speedup == pytest.approx(predict_chain([0.8], curves, [best]).speedup)
    assert hf.loss == pytest.approx(1 - hf.chosen.speedup / read_plan(plan).best.exact.speedup)
    # unloadable members are listed with their reason, never chosen
    reasons = {o.drafter: o.reason for o in hf.options}
    assert "quantizes to int8 in torch" in reasons["target-int8"] and "early-exit" in reasons["target-exit2"]
    assert engine_config(hf)["num_assistant_tokens"] == best and engine_config(hf)["do_sample"] is True
    assert engine_config(vllm) == {"method": "ngram", "num_speculative_tokens": vllm.chosen.block_size,
                                   "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert "--speculative-config" in config_text(vllm)
    assert export_to_json(hf)["chosen"]["drafter"] == "draft"


def test_negative_control_without_the_engine_rate_vllm_cannot_use_the_draft_model(files):
    plan, root = files
    export = export_plan(read_plan(plan), _profile(engine_rate=False), _candidates(root), "vllm")
    draft = next(o for o in export.options if o.drafter == "draft")
    assert draft.block_size is None and "re-run polyplan profile" in draft.reason
    assert export.chosen.drafter == "ngram"  # its one-hot proposal needs no engine rate


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_export_cli_prints_what_to_type_and_json(files):
    plan, root = files
    result = _invoke("export", "--plan", plan, "--engine", "hf")
    assert result.exit_code == 0, result.output
    assert "assistant = AutoModelForCausalLM.from_pretrained(" in result.stdout
    assert "assistant.generation_config.num_assistant_tokens = " in result.stdout and "assistant_model=assistant" in result.stdout
    assert "target-int8" in result.stdout and "early-exit" in result.stdout
    payload = json.loads(_invoke("export", "--plan", plan, "--engine", "vllm", "--json").stdout)
    assert payload["config"]["method"] == "ngram" and payload["loss"] is not None


@pytest.mark.parametrize(
    ("engine", "change", "message"),
    [
        ("tensorrt", None, "unknown engine 'tensorrt'"),
        ("llama.cpp", None, "cannot load the plan's target 'target'"),
        ("hf", "missing-drafter", "source folder './draft' not found"),
        ("hf", "missing-profile", "not found; pass --profile"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(files, engine, change, message):
    plan, root = files
    if change == "missing-drafter":
        (root / "draft").rmdir()
    if change == "missing-profile":
        (root / "profile.json").unlink()
    result = _invoke("export", "--plan", plan, "--engine", engine)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


def test_a_gguf_drafter_is_loaded_by_hf_through_gguf_file_and_refused_by_vllm(files):
    import dataclasses

    from polyplan.formats.candidates import CandidateSet

    plan, root = files
    candidates = _candidates(root)
    gguf = dataclasses.replace(candidates.by_name("draft"), source=str(root / "draft-q8.gguf"), source_kind="gguf")
    swapped = CandidateSet(tuple(gguf if c.name == "draft" else c for c in candidates.candidates), "models.yaml")
    hf = export_plan(read_plan(plan), _profile(), swapped, "hf")
    assert hf.chosen.drafter == "draft"
    assert f"from_pretrained({str(root)!r}, gguf_file='draft-q8.gguf')" in config_text(hf)
    vllm = export_plan(read_plan(plan), _profile(), swapped, "vllm")
    assert "is a GGUF file" in next(o for o in vllm.options if o.drafter == "draft").reason


def test_export_says_which_loop_overhead_it_used_and_hf_uses_its_own(files):
    """Old profile (no HF entry): polyplan's loop, said so; with HF's measured entry the HF
    prediction uses it (another speedup) and says so; vLLM keeps polyplan's loop and says so."""
    from polyplan.formats.profile import EngineCalibration, LoopCalibration, read_profile

    plan, root = files
    before = _invoke("export", "--plan", plan, "--engine", "hf")
    assert before.exit_code == 0, before.output
    assert "loop overhead: HF overhead not measured; prediction uses polyplan's loop overhead (none measured)" in before.stdout
    old = json.loads(_invoke("export", "--plan", plan, "--engine", "hf", "--json").stdout)
    profile = dataclasses.replace(
        read_profile(root / "profile.json"), loop_overhead={"t1.0": LoopCalibration(0.0, 0.0)},
        engine_overhead={"hf": {"t1.0": EngineCalibration(0.004, 0.02, per_call_s=0.0, fingerprint="sha256:x")}},
    )
    write_profile(profile, root / "profile.json")
    after = _invoke("export", "--plan", plan, "--engine", "hf")
    assert "loop overhead: HF generate's own, measured (4000 us/step + 20000 us/round)" in after.stdout
    new = json.loads(_invoke("export", "--plan", plan, "--engine", "hf", "--json").stdout)
    assert new["overhead"].startswith("loop overhead: HF generate's own")
    assert new["chosen"]["predicted_speedup"] != pytest.approx(old["chosen"]["predicted_speedup"], rel=1e-3)
    # the exact model with HF's costs: recompute the chosen drafter's prediction by hand
    chosen = new["chosen"]
    profile = read_profile(root / "profile.json")
    curves = [curve_from_profile(profile.model("target"), None), curve_from_profile(profile.model(chosen["drafter"]), None)]
    from polyplan.formats.overhead import LoopOverhead

    expected = predict_chain([chosen["alpha"]], curves, [chosen["block_size"]], LoopOverhead(0.004, 0.02))
    assert chosen["predicted_speedup"] == pytest.approx(expected.speedup, rel=1e-12)
    vllm = _invoke("export", "--plan", plan, "--engine", "vllm")
    assert "loop overhead: polyplan's (0 us/step + 0 us/round); vllm's own loop is not measured by polyplan" in vllm.stdout


def test_hf_export_carries_the_whole_call_model_of_each_option(files):
    """Issue 14c: the HF export models whole `generate` calls from the profile: the stored
    per-call cost, the target's and a draft model's prefill (none for n-gram), K extra tokens in
    the target's first pass, and the first passes' decode work replaced by the prefills."""
    from polyplan.planner.exact.whole_call import PrefillCurve
    from polyplan.formats.profile import EngineCalibration, PrefillPoint

    plan, root = files
    profile = _profile()
    old = export_plan(read_plan(plan), profile, _candidates(root), "hf")
    assert "HF's per-call cost" in old.call_note and "target's prefill" in old.call_note
    assert old.baseline_call.per_call_s == 0.0 and old.baseline_call.target_prefill is None
    profile = dataclasses.replace(
        profile, models=tuple(dataclasses.replace(model, prefill=(PrefillPoint(64, TIMES[model.name] * 3),)) for model in profile.models),
        engine_overhead={"hf": {"t1.0": EngineCalibration(0.001, 0.002, per_call_s=0.007)}},
    )
    export = export_plan(read_plan(plan), profile, _candidates(root), "hf")
    assert export.call_note == ""
    target = curve_from_profile(profile.model("target"), None)
    assert export.baseline_call.per_call_s == 0.007
    assert export.baseline_call.per_token_s == pytest.approx(target(1) + 0.001)
    assert export.baseline_call.replaced_s == pytest.approx(target(1))
    assert export.baseline_call.target_prefill == PrefillCurve((64,), (TIMES["target"] * 3,))
    for option in export.options:
        if option.reason is not None:
            assert option.call is None
            continue
        call, k = option.call, option.block_size
        assert call.per_token_s == option.prediction.cost_per_token and call.extra_tokens == k and call.per_call_s == 0.007
        drafter = curve_from_profile(profile.model(option.drafter), None)
        if option.method == "ngram":
            assert call.drafter_prefill is None and call.replaced_s == pytest.approx(target(k + 1))
        else:
            assert call.drafter_prefill == PrefillCurve((64,), (TIMES[option.drafter] * 3,))
            assert call.replaced_s == pytest.approx(target(k + 1) + drafter(1))
    assert export_plan(read_plan(plan), profile, _candidates(root), "vllm").baseline_call is None
    # the export prints the per-token figure as the long-generation limit, and one whole-call example
    prompt, new, speedup = export.whole_call_example()
    base, ours = export.baseline_call, export.chosen.call
    assert (prompt, new) == (export.context_length or 128, 128)
    assert speedup == pytest.approx(base.seconds(prompt, new) / ours.seconds(prompt, new))
    lines = "\n".join(export_lines(export))
    assert "long-generation limit" in lines and f"{prompt}-token prompt and {new} new tokens: predicted {speedup:.2f}x" in lines


def test_export_cli_says_the_per_token_figure_is_the_long_generation_limit(files):
    plan, _ = files
    result = _invoke("export", "--plan", plan, "--engine", "hf")
    assert result.exit_code == 0 and "per decoded token: the long-generation limit" in result.stdout
    payload = json.loads(_invoke("export", "--plan", plan, "--engine", "hf", "--json").stdout)
    assert payload["whole_call_example"]["new_tokens"] == 128 and "per-call cost" in payload["whole_call_example"]["note"]
