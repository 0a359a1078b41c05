"""polyplan.models: from models.yaml to chain members.

Sources (`sources`), derived copies (`derive`, and `llama_quantize`, `gguf_prune`, `llama_vocab`
on llama.cpp), the one loader (`loader`), chains resolved from a plan or names
(`chain_candidates`), and the fingerprints that key every measurement (`fingerprints`).
"""
