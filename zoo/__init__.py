"""The embedded model family: a small code-model family that polyplan trains itself.

The corpus is the Python standard library's own source (the one corpus every machine has),
the tokenizer a byte-level BPE trained with `tokenizers`, the models Llama-style causal LMs
saved in Hugging Face format. `polyplan zoo train` reproduces the shipped family from the
seeded recipe in `polyplan.zoo.recipe`; the shipped weights live in `polyplan/data/family/`.
"""
