"""Pin profile.json and plan.json as today's code (main at 63d7747) writes them.

Run from the repository root with the code before the codec change checked out."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from polyplan.formats.plan import ChainCheck, SelfCheckRecord, save_plan
from polyplan.formats.processor import Processor
from polyplan.formats.profile import (
    AgreementRuns, AlphaDistribution, DecodedStats, EngineCalibration, ImpliedStats, LatencyPoint, LoopCalibration,
    ModelProfile, PairAgreement, PrefillPoint, Profile, ProfilerRecord, SamplingStats, SwitchCosts, TargetStream, TimingHealth,
)
from polyplan.formats.profile_codec import load
from polyplan.planner.plan_file import plan_from_profile, plan_of, profile_digest

DATA = Path("tests/data")
PAPER = Path("polyplan/data/paper_table1_profile.json")

# 1. the paper's Table 1 profile (version 1) as today's code writes it back (version 2)
load(PAPER).save(DATA / "profile_v2_paper.json")

# 2. a profile holding every record the profile codec writes
EPYC = Processor("AMD EPYC 9R14", "x86_64", ("avx2", "avx512_bf16", "avx512f", "fma"), "x86", "AVX512", 2)
profile = Profile(target="big", device="cpu AMD EPYC 9R14 (2 threads)", processor=EPYC, created="2026-11-26T00:00:00Z",
                  notes="every record of schema_version 2, written by polyplan before the one codec (issue 30)")
profile.meta = {"room": "B12", "nested": {"list": [1, 2.5, "x", None, True]}}
profile.models.append(ModelProfile(
    "big", "sha256:big", [LatencyPoint(64, 1, 0.02, 0.001, 9, (0.0199, 0.02, 0.0203), 1), LatencyPoint(64, 4, 0.026, 0.0015, 9)],
    [PrefillPoint(64, 0.05, 0.002, 3)], meta={"note": "the target"}, latency_fingerprint="sha256:lat-big",
    timing=TimingHealth(0.002, 0.03, 1, 20, True, 1, 2, 0.4),
))
profile.models.append(ModelProfile("small", "sha256:small", [LatencyPoint(64, 1, 0.002), LatencyPoint(64, 4, 0.0031)],
                                   latency_fingerprint="sha256:lat-small", timing=TimingHealth(reference_median_s=0.002)))
profile.models.append(ModelProfile("ngram", "sha256:ngram", [LatencyPoint(64, 1, 0.00001)], ngram_simple=3))
profile.add_pair("big", "small").sampling["greedy"] = SamplingStats(
    alpha=0.7, alpha_samples=400, alpha_ci=(0.65, 0.74),
    alpha_distribution=AlphaDistribution(0.7, 0.45, {"0.1": 0.2, "0.5": 1.0, "0.9": 1.0}, 400, autocorrelation=0.2),
    implied=[ImpliedStats(2, 2.19, 2.3), ImpliedStats(4, 2.77)],
    decoded=[DecodedStats(4, 2.9, 1.1, 120, mu_ci=(2.7, 3.1), sigma_ci=(1.0, 1.2), prompts=8, fingerprint="sha256:dec")],
    fingerprint="sha256:alpha", warnings=["K=4: decoded mu 2.90 vs 2.77 implied"], engine_alpha=0.66, engine_alpha_ci=(0.6, 0.7),
)
profile.pairs[0].sampling["t1.0"] = SamplingStats(alpha=0.6)
profile.profiler = ProfilerRecord(latency={"ks": [1, 4]}, acceptance={"block_sizes": [2, 4]}, prompts=8, decoded_prompts=4,
                                  torch="2.4.0", prompt_file="/prompts.jsonl", raw_prompts=True,
                                  candidates={"path": "/m/models.yaml", "yaml": {"candidates": [{"name": "big"}]}, "device": "cpu"})
profile.loop_overhead = {"greedy": LoopCalibration(1e-4, 2e-4, 32000, 1, "fit", "sha256:l"), "t1.0": LoopCalibration(1e-4, 3e-4)}
profile.engine_overhead = {"hf": {"greedy": EngineCalibration(1e-4, 1e-3, 0.004, "sha256:e", {"drafter": "small", "threads": 1})}}
profile.switch_costs = SwitchCosts({"big": (0.001,), "small": (0.0002, 0.0001)}, 64, "per position", "sha256:s")
profile.acceptance_runs = {"greedy": AgreementRuns((PairAgreement("big", "small", ("1101", "0")),), "sha256:r", 2, 4,
                                                   (TargetStream(3, (1, 2, 3, 4, 5)), TargetStream(1, (0, 7))))}
profile.save(DATA / "profile_v2_full.json")

# 3. recommend on the paper's Table 1 profile (the CLI, default options: intervals, limit, triples)
subprocess.run(["/work/venv/codec/bin/polyplan", "recommend", "--profile", str(PAPER), "--out", str(DATA / "plan_v2_paper.json")],
               check=True, stdout=subprocess.DEVNULL)

# 4. a plan with every optional record: processor, candidates, loop overhead and switch costs,
#    verify widths, each chain's self-check and the plan's self-check record
paper = load(PAPER)
paper.processor = EPYC
paper.loop_overhead = {"greedy": LoopCalibration(1e-4, 3e-4)}
paper.switch_costs = SwitchCosts({"eagle": (2e-4, 5e-5)})
result = plan_from_profile(paper, None, profile_path="profile.json", resamples=40)
plan = plan_of(result, profile_path="profile.json", candidates={"path": "/m/models.yaml", "yaml": {"candidates": [{"name": "t"}]}, "device": "cpu"},
               profile_digest=profile_digest(paper))
checked = [dataclasses.replace(chain, check=ChainCheck(1.1, 1.05, 1.2, chain.exact_speedup / 1.1,
                                                        None if chain.exact_interval is None else (chain.exact_interval[0] / 1.2, chain.exact_interval[1] / 1.05),
                                                        None if index else 2.0, pooled=bool(index)))
           for index, chain in enumerate(plan.alternatives)]
plan = dataclasses.replace(plan, alternatives=tuple(checked), self_check=SelfCheckRecord(4, 32, 2, 8.5, (plan.alternatives[0].chain,), None))
save_plan(plan, DATA / "plan_v2_checked.json")
print("written")
