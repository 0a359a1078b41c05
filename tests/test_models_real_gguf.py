"""The development model from `polyplan fetch gemma-3-270m`, when it has been fetched (slow;
skipped otherwise): it loads through a models.yaml `source:`, is dequantized once, and greedy
decoding is lossless with a drafter beside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polyplan.formats.fetchable import MODELS, default_path

pytestmark = pytest.mark.slow


def _fetched() -> Path:
    path = Path(os.environ.get("POLYPLAN_GEMMA_GGUF", default_path(MODELS["gemma-3-270m"])))
    if not path.is_file():
        pytest.skip(f"{path} not fetched (run `polyplan fetch gemma-3-270m`, or set POLYPLAN_GEMMA_GGUF)")
    return path


def test_fetched_gemma_loads_from_models_yaml_and_decodes_losslessly(tmp_path, single_thread):
    from polyplan.formats.candidates import read_candidates
    from polyplan.decoder import generate
    from polyplan.models.loader import load_candidates
    from polyplan.decoder.member import stop_token_ids

    path = _fetched()
    (tmp_path / "models.yaml").write_text(
        "candidates:\n"
        f"  - {{name: gemma, source: {path}, target: true}}\n"
        "  - {name: ngram, derive: {kind: ngram, max_n: 3}}\n"
    )
    loaded = load_candidates(read_candidates(tmp_path / "models.yaml"))
    target, ngram = loaded.member("gemma"), loaded.member("ngram")
    assert target.vocab_size == 262144 and 1 in stop_token_ids(target)  # <eos>
    prompt = loaded.tokenizer("The capital of France is")["input_ids"]
    alone = generate([target], prompt, max_new_tokens=8, eos_token_id=stop_token_ids(target))
    chained = generate([target, ngram], prompt, max_new_tokens=8, block_sizes=[3], eos_token_id=stop_token_ids(target))
    assert chained.token_ids == alone.token_ids
    text = loaded.tokenizer.decode(list(alone.token_ids), skip_special_tokens=True)
    assert sum(word.isalpha() for word in text.split()) >= 3, text  # English words, not byte soup
