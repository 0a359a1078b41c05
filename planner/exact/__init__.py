"""polyplan.planner.exact: the exact cost model of a chain, and what it reads from a profile.

- `cost_model`: the exact expected cost per token of a chain of any length (DP).
- `latency`: latency curves T_i(k) between measured widths; `verify_width`: their monotone envelope.
- `overhead`: the decoding loop's own cost and switch costs (and the one fit of loop costs).
- `runs`: acceptance runs (bursty acceptance) from measured agreement sequences.
- `draft_rounds`: a last drafter's rounds, the joint law of tokens drafted and accepted (a rule
  drafter's, or a model drafter's under a draft policy).
- `policy_replay`: a model drafter's draft policy (adaptive cap, confidence stop) replayed on its
  agreement sequences.
- `ngram_replay`: llama.cpp's `ngram-simple` (and polyplan's) replayed on the target's streams;
  `ngram_rules`: llama.cpp's other n-gram drafters, ported, replayed through a server session.
- `physical_limit`: what a free, always-right drafter would give the target.
- `required_drafter`: what would pay: the acceptance a drafter of a given cost needs for a
  target speedup, and the largest cost it may have at a given acceptance.
- `engine_overhead`: an engine's own loop overhead (HF `generate`), as the profile stores it;
  `whole_call`: whole `generate` calls (set-up and prefills) as `bench peers` times them.
"""
