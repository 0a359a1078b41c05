"""polyplan.planner: the paper's theory, the exact cost model and the chain search.

Pure math on profile data (numpy, sympy and optuna, imported lazily where heavy); it never
imports torch, so `polyplan recommend` runs on a machine without any model.

- `capped_geometric`: tokens per verification, exact (sympy-derived) and as the paper prints it.
- `lemma31`: the paper's φ_i and ideal time T for n models.
- `insertion`: Theorem 3.2 (conditions, assumptions, exact 3-vs-2 difference, verdict).
- `cost_model`: the exact expected cost per token of a chain of any length (DP).
- `simulate`: Monte-Carlo simulation of the same recursion (the cost model's reference).
- `paper_model`: Lemma 3.1 fed from a profile.
- `search`: `recommend(profile)`, every chain and block sizes, ranked.
- `physical_limit`: what a free, always-right drafter would give the target (no chain beats it).
- `insertion_triples`: Theorem 3.2 on one insertion (upper, middle, lower) of a profile's chains.
- `plan_file`: plan.json; `report`: the theory report.
- `engines`: a plan exported to HF transformers, vLLM or llama.cpp under their acceptance rules.
"""

from polyplan.planner.paper.capped_geometric import (
    capped_geometric_mean,
    capped_geometric_pmf,
    capped_geometric_variance,
    derive_moments,
    paper_a2_variance,
    paper_eq3_mean,
    paper_eq3_mean_literal,
    paper_eq4_relative_variability,
    paper_sigma2,
    relative_variability,
)
from polyplan.planner.exact.cost_model import ChainPrediction, predict_chain
from polyplan.planner.paper.insertion import Condition, InsertionAnalysis, analyze_insertion
from polyplan.planner.exact.latency import LatencyCurve, constant_curve, curve_from_profile
from polyplan.planner.paper.lemma31 import IdealTime, ideal_speedup, ideal_time
from polyplan.planner.paper.paper_model import PaperPrediction, paper_prediction
from polyplan.planner.plan_file import plan_to_json_dict, write_plan
from polyplan.planner.report import TheoryReport, theory_report
from polyplan.planner.search import ChainPlan, InsertionNote, Recommendation, evaluate_chain, recommend
from polyplan.planner.exact.simulate import Estimate, SimulationResult, simulate_chain

__all__ = [
    "ChainPlan",
    "ChainPrediction",
    "Condition",
    "Estimate",
    "IdealTime",
    "InsertionAnalysis",
    "InsertionNote",
    "LatencyCurve",
    "PaperPrediction",
    "Recommendation",
    "SimulationResult",
    "TheoryReport",
    "analyze_insertion",
    "capped_geometric_mean",
    "capped_geometric_pmf",
    "capped_geometric_variance",
    "constant_curve",
    "curve_from_profile",
    "derive_moments",
    "evaluate_chain",
    "ideal_speedup",
    "ideal_time",
    "paper_a2_variance",
    "paper_eq3_mean",
    "paper_eq3_mean_literal",
    "paper_eq4_relative_variability",
    "paper_prediction",
    "paper_sigma2",
    "plan_to_json_dict",
    "predict_chain",
    "recommend",
    "relative_variability",
    "simulate_chain",
    "theory_report",
    "write_plan",
]
