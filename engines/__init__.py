"""polyplan.engines: the other engines, as peers to race and as export targets.

`hf_generate` runs Hugging Face `generate` (plain, assisted, prompt lookup) next to polyplan's
loop; `hf_overhead` measures HF's own per-step cost that the HF prediction reads; `export`
prints another engine's configuration with its predicted speedup; `peers` races every exported
configuration against polyplan's plan. The `bench` commands call these.
"""
