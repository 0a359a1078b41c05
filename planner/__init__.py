"""polyplan.planner: the paper's theory, the exact cost model, the intervals and the chain search.

Pure math on profile data (numpy, sympy and optuna, imported lazily where heavy); it never
imports torch, so `polyplan recommend` runs on a machine without any model.

- `paper/`: the paper's theory as printed, and fed from a profile (its `__init__` lists the modules).
- `exact/`: the exact cost model of a chain and what it reads from a profile.
- `intervals/`: how far a prediction can move with the measurement noise.
- `search`: `rank_chains(profile)`, every chain and its block sizes, ranked.
- `plan_builder`: a plan built from the ranking (plan.json itself is `formats.plan`); `plan_check`:
  whether a plan is still what the planner made; `theory_report`: the theory report;
  `profile_sampling`: the sampling mode to plan for when none is named.
- `engine_export`: a plan exported to HF transformers, vLLM or llama.cpp under their acceptance
  rules; `llama_cpp/`: llama-server's configurations predicted and ranked.

The package exports what `polyplan theory` and the notebooks read: the paper's formulas, Theorem
3.2 (with its inputs for any triple of a profile, `insertion_inputs`, and its evaluation beside
the exact model, `triple_insertion`) and the theory report. Everything else is imported from its module.
"""

from polyplan.planner.paper.capped_geometric import (
    capped_geometric_mean,
    capped_geometric_variance,
    paper_a2_variance,
    paper_eq3_mean,
    paper_eq3_mean_literal,
    paper_eq4_relative_variability,
    paper_sigma2,
    relative_variability,
)
from polyplan.planner.paper.insertion import InsertionAnalysis, analyze_insertion
from polyplan.planner.paper.insertion_triples import InsertionInputs, TripleInsertion, insertion_inputs, triple_insertion
from polyplan.planner.theory_report import TheoryReport, theory_report
from polyplan.planner.search import ChainPlan

__all__ = [
    "ChainPlan",
    "InsertionAnalysis",
    "InsertionInputs",
    "TheoryReport",
    "TripleInsertion",
    "analyze_insertion",
    "capped_geometric_mean",
    "capped_geometric_variance",
    "insertion_inputs",
    "paper_a2_variance",
    "paper_eq3_mean",
    "paper_eq3_mean_literal",
    "paper_eq4_relative_variability",
    "paper_sigma2",
    "relative_variability",
    "theory_report",
    "triple_insertion",
]
