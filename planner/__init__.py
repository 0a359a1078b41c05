"""polyplan.planner: the paper's theory, the exact cost model, the intervals and the chain search.

Pure math on profile data (numpy, sympy and optuna, imported lazily where heavy); it never
imports torch, so `polyplan recommend` runs on a machine without any model.

- `paper/`: the paper's theory as printed: `capped_geometric` (tokens per verification, eq. 3
  and 4), `lemma31` (φ_i and the ideal time T), `insertion` (Theorem 3.2), `paper_model`
  (Lemma 3.1 fed from a profile), `insertion_triples` (Theorem 3.2 on one insertion of a
  profile's chains).
- `exact/`: the exact cost model and what it reads: `cost_model` (expected cost per token of a
  chain of any length), `simulate` (its Monte-Carlo reference), `latency` and `verify_width`
  (T(k) and its monotone envelope), `overhead` (loop and switch costs, and the one fit of loop
  costs), `runs` and `draft_rounds` (acceptance runs, a last drafter's rounds), `policy_replay`
  (a model drafter's draft policy replayed), `ngram_replay`
  and `ngram_rules` (n-gram drafters replayed on the target's streams), `physical_limit` (a
  free, always-right drafter), `required_drafter` (the acceptance or cost a drafter needs for a
  target speedup), `engine_overhead` and `whole_call` (an engine's loop and whole
  `generate` calls).
- `intervals/`: `prediction_interval` (bootstrap intervals of a predicted speedup),
  `interval_coverage` (their check on a profile's own prompts), `sample_size` (how many prompts
  an interval needs), `timing_health` (whether a profile's timings can be planned on).
- `search`: `recommend(profile)`, every chain and block sizes, ranked.
- `plan_file`: a plan built from a recommendation (plan.json itself is `formats.plan`);
  `plan_check`: whether a plan is still what the planner made; `report`: the theory report;
  `profile_sampling`: the sampling mode to plan for when none is named.
- `engine_rules`: a plan exported to HF transformers, vLLM or llama.cpp under their acceptance
  rules (what to type is rendered by `engines.export`); `llama_cpp_ranking`: every llama-server
  configuration, and off, ranked; `llama_cpp_policy`: a plan's draft policy as llama-server runs it.

The package exports what `polyplan theory` reads from it: the paper's formulas, Theorem 3.2 and
the theory report; and Theorem 3.2's inputs for any (upper, middle, lower) triple of a profile
and block sizes (`insertion_inputs`, `InsertionInputs`), with its evaluation beside the exact
model (`triple_insertion`, `TripleInsertion`). Everything else is imported from its module.
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
