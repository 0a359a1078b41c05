"""polyplan.planner.exact: the exact cost model of a chain, and what it reads from a profile.

- `cost_model`: the exact expected cost per token of a chain of any length (DP).
- `latency`: latency curves T_i(k) between measured widths; `verify_width`: their monotone envelope.
- `overhead`: the decoding loop's own cost and switch costs (and the one fit of loop costs).
- `runs`: acceptance runs (bursty acceptance) from measured agreement sequences.
- `draft_rounds`: a last drafter's rounds, the joint law of tokens drafted and accepted.
- `policy_replay`: a model drafter's draft policy replayed on its agreement sequences.
- `ngram_replay`: `ngram-simple` replayed on the target's streams.
- `physical_limit`: what a free, always-right drafter would give the target.
- `required_drafter`: the acceptance or cost a drafter needs for a target speedup.
- `pair_bound`: the best a drafter could give its verifier, from latency curves alone.
- `engine_overhead`: an engine's own loop overhead (HF `generate`), as the profile stores it;
  `whole_call`: whole `generate` calls (set-up and prefills) as `bench peers` times them.
"""
