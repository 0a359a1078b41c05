"""Where does int8 lose the target's greedy token? Teacher-forced argmax agreement of int8 variants.

For a HF causal LM (a folder, or a .gguf file dequantized through polyplan's cache) the target
greedily continues each prompt; then one forward pass of each variant over prompt + continuation
gives its argmax at every continuation position, compared with the target's own. Agreement is
deterministic (no sampling), so it can be measured on a loaded machine. Variants: torch's
dynamic int8 on every linear / the LM head only / the decoder layers only / attention / MLP,
per-channel weight scales, int8 embeddings, weight-only int8 (simulated in float32: plain torch
has no fast CPU kernel for it), `quantize: int8-head` (the LM head in int8, top logits exact),
and int8 or bf16 layers with that head (`quantize: int8 | bf16, head: int8`).

    python examples/int8_agreement.py MODEL [--prompts examples/spec_bench_style.jsonl]
        [--count 8] [--new-tokens 64] [--threads 1]

Prints one line per variant: agreement over all positions, the worst prompt's, and the name.
"""

from __future__ import annotations

import argparse
import copy
import warnings
from pathlib import Path

import torch
from torch import nn


def _load(source: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(source)
    if folder.suffix == ".gguf":
        from polyplan.models.gguf_source import hf_folder_for_gguf

        folder = hf_folder_for_gguf(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()
    return model, tokenizer


def _dynamic(model: nn.Module, spec) -> nn.Module:
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), spec, dtype=torch.qint8)


def _per_row(weight: torch.Tensor) -> torch.Tensor:
    """int8 with one scale per output row, dequantized back to float32."""
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
    return torch.round(weight / scale).clamp(-127, 127) * scale


def _weight_only(model: nn.Module, names: set[str]) -> nn.Module:
    model = copy.deepcopy(model)
    for name, module in model.named_modules():
        if name in names:
            module.weight = nn.Parameter(_per_row(module.weight.detach()))  # unties a tied LM head
    return model


def _int8_embeddings(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model)
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    head.weight = nn.Parameter(head.weight.detach().clone())  # untie: the LM head stays float32
    embedding.weight = nn.Parameter(_per_row(embedding.weight.detach()))
    return model


def variants(model: nn.Module) -> dict[str, callable]:
    from polyplan.models.derive import quantize_model

    linears = {name for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    head = next(name for name, module in model.named_modules() if module is model.get_output_embeddings())
    body = linears - {head}
    attention = {name for name in body if "attn" in name}
    mlp = {name for name in body if "mlp" in name}
    per_tensor, per_channel = torch.ao.quantization.default_dynamic_qconfig, torch.ao.quantization.per_channel_dynamic_qconfig
    return {
        "dynamic int8, every linear (quantize: int8)": lambda: quantize_model(model, "int8"),
        "dynamic int8, LM head only": lambda: _dynamic(model, {head: per_tensor}),
        "dynamic int8, every linear but the LM head": lambda: _dynamic(model, {n: per_tensor for n in body}),
        "dynamic int8, attention linears only": lambda: _dynamic(model, {n: per_tensor for n in attention}),
        "dynamic int8, MLP linears only": lambda: _dynamic(model, {n: per_tensor for n in mlp}),
        "dynamic int8 per-channel weights, every linear": lambda: _dynamic(model, {nn.Linear: per_channel}),
        "dynamic int8 per-channel weights, LM head only": lambda: _dynamic(model, {head: per_channel}),
        "embeddings int8 per row only (simulated)": lambda: _int8_embeddings(model),
        "weight-only int8 per channel, every linear (simulated)": lambda: _weight_only(model, linears),
        "weight-only int8 per channel, LM head only (simulated)": lambda: _weight_only(model, {head}),
        "int8 layers per channel, int8-head's head (quantize: int8, head: int8)": lambda: quantize_model(model, "int8", head="int8"),
        "bf16 layers, int8-head's head (quantize: bf16, head: int8)": lambda: quantize_model(model, "bf16", head="int8"),
        "LM head dynamic int8, top 32 exact (quantize: int8-head)": lambda: quantize_model(model, "int8-head"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a HF model folder or a .gguf file")
    parser.add_argument("--prompts", default=str(Path(__file__).with_name("spec_bench_style.jsonl")))
    parser.add_argument("--count", type=int, default=8, help="prompts used (the first COUNT)")
    parser.add_argument("--new-tokens", type=int, default=64, help="target tokens per prompt")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from polyplan.formats.errors import PolyplanError
    from polyplan.profiler.prompts import encode_prompts, read_prompt_file

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message="torch.quantize_per_tensor", category=UserWarning)
    model, tokenizer = _load(args.model)
    prompts = encode_prompts(read_prompt_file(args.prompts)[: args.count], tokenizer, raw=True)
    sequences = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt.ids])
            out = model.generate(ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)
            sequences.append((len(prompt.ids), out))

    def argmaxes(candidate: nn.Module) -> list[torch.Tensor]:
        with torch.inference_mode():
            return [candidate(sequence).logits[0, start - 1 : -1].argmax(-1) for start, sequence in sequences]

    reference = argmaxes(model)
    positions = sum(len(r) for r in reference)
    print(f"{len(sequences)} prompts x {args.new_tokens} target tokens = {positions} positions")
    for name, make in variants(model).items():
        try:
            found = argmaxes(make())
        except PolyplanError as error:  # e.g. bf16 on a CPU without native bf16 matmul
            print(f"    -  {name}: {error}", flush=True)
            continue
        per_prompt = [float((f == r).float().mean()) for f, r in zip(found, reference)]
        agreement = sum(int((f == r).sum()) for f, r in zip(found, reference)) / positions
        print(f"{agreement:.3f}  worst prompt {min(per_prompt):.3f}  {name}", flush=True)


if __name__ == "__main__":
    main()
