"""polyplan.engines: the other engines, as peers to race and as export targets.

`hf_generate` runs Hugging Face `generate` next to polyplan's loop; `hf_overhead` measures HF's
own loop cost that the HF prediction reads; `export` prints another engine's configuration with
its predicted speedup; `race` races them against polyplan's plan (HF's contenders in `hf_race`,
llama-server's in `llama_cpp/`, which also builds and calibrates the server).
"""
