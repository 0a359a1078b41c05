"""Write a tiny Llama-architecture GGUF file in a test (the `gguf` package's GGUFWriter).

The weights are `conftest.tiny_llama`'s, with q/k permuted as llama.cpp's converter does (so
transformers' loader, which undoes that permutation, gets the original model back); the
tokenizer is the shipped family's byte-level BPE (vocabulary and merges, model "gpt2") plus
two control tokens for a chat template: `<|user|>` and `<|end|>` (the end-of-turn token).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import tiny_llama

CHAT_TEMPLATE = (
    "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|user|>{% endif %}"
)
CONTROL_TOKENS = ("<|user|>", "<|end|>")


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary layout of a q/k projection (transformers' GGUF loader reverses it)."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def family_vocabulary() -> tuple[list[str], list[str]]:
    """The shipped family's tokens (by id) and merges, plus `CONTROL_TOKENS` at the end."""
    from polyplan.models.builtin import builtin_folder

    data = json.loads((builtin_folder("target") / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens + list(CONTROL_TOKENS), merges


TARGET_LAYERS = 6  # a tiny target a 1-layer drafter is clearly cheaper than (T(1) about twice the drafter's)


def write_tiny_gguf(
    path: Path, *, architecture: str = "llama", chat_template: str | None = CHAT_TEMPLATE, seed: int = 0, layers: int = 2,
    per_layer_heads: bool = False, context_length: int | None = None,
):
    """Write the GGUF file and return the float32 `LlamaForCausalLM` it holds.

    `architecture` other than "llama" writes the same tensors under another architecture name
    (to test an architecture transformers cannot read). `per_layer_heads` writes the head counts
    as per-layer arrays (one element per block, as llama.cpp accepts them) instead of numbers.
    `context_length` overrides the trained context the file states (llama-server caps `-c` there).
    """
    import gguf

    tokens, merges = family_vocabulary()
    model = tiny_llama(seed, layers=layers, hidden=32, vocab=len(tokens))
    config = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny")
    writer.add_context_length(config.max_position_embeddings if context_length is None else context_length)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    writer.add_head_count([heads] * layers if per_layer_heads else heads)
    writer.add_head_count_kv([kv_heads] * layers if per_layer_heads else kv_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(float(getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]))
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    control = {0, *(tokens.index(t) for t in CONTROL_TOKENS)}
    writer.add_token_types([gguf.TokenType.CONTROL if i in control else gguf.TokenType.NORMAL for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_eot_token_id(tokens.index("<|end|>"))
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    state = {name: value.detach().numpy() for name, value in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    writer.add_tensor("output.weight", state["lm_head.weight"])
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_norm.weight", state[layer + "input_layernorm.weight"])
        writer.add_tensor(f"blk.{i}.attn_q.weight", _permute(state[layer + "self_attn.q_proj.weight"], config.num_attention_heads))
        writer.add_tensor(f"blk.{i}.attn_k.weight", _permute(state[layer + "self_attn.k_proj.weight"], config.num_key_value_heads))
        writer.add_tensor(f"blk.{i}.attn_v.weight", state[layer + "self_attn.v_proj.weight"])
        writer.add_tensor(f"blk.{i}.attn_output.weight", state[layer + "self_attn.o_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", state[layer + "post_attention_layernorm.weight"])
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", state[layer + "mlp.gate_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_up.weight", state[layer + "mlp.up_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_down.weight", state[layer + "mlp.down_proj.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def pinned_server_and_tiny_gguf(folder: Path) -> tuple[Path, Path]:
    """The pinned llama-server binary and a tiny GGUF written into `folder`; the test is
    skipped where llama_cpp is not installed or the server has not been built."""
    import pytest

    from polyplan.engines.llama_cpp.build import require_build
    from polyplan.formats.errors import PolyplanError

    pytest.importorskip("llama_cpp")
    try:
        build = require_build()
    except PolyplanError as error:
        pytest.skip(str(error))
    model = folder / "tiny.gguf"
    write_tiny_gguf(model)
    return build.server, model
