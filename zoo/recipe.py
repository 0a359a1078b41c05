"""The seeded recipes that produce the embedded family (`FULL`) and a tiny one (`QUICK`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from transformers import LlamaConfig


@dataclass(frozen=True)
class ModelShape:
    """The architecture of one Llama-style model of the family."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int

    def config(self, vocab_size: int, max_context: int, eos_token_id: int) -> LlamaConfig:
        """The Hugging Face config (tied embeddings: the vocabulary is small, the model too)."""
        return LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            max_position_embeddings=max_context,
            tie_word_embeddings=True,
            bos_token_id=eos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=eos_token_id,
            rope_theta=10000.0,
        )


@dataclass(frozen=True)
class Schedule:
    """An AdamW run: `steps` batches of `batch_size` windows, cosine decay after warm-up."""

    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int
    weight_decay: float = 0.1


@dataclass(frozen=True)
class Refinement:
    """The drafter's refinement against the finished target (`polyplan.zoo.refine`) on windows of
    `window` tokens (the family's context: decoding reads the drafter at every position up to it),
    scored on-policy on the target's continuations of `eval_prompt_tokens`-token prompts."""

    schedule: Schedule
    window: int
    eval_prompt_tokens: int
    eval_continuation_tokens: int


@dataclass(frozen=True)
class Recipe:
    """Everything `polyplan zoo train` needs to reproduce a family from a seed: the shapes, the
    schedules and the losses' weights of `zoo.train.train_pair`, and the refinement after it
    (`drafter_refine`, `zoo.refine`; None: none)."""

    name: str
    vocab_size: int
    seq_len: int
    max_context: int
    held_out_every: int
    max_train_chars: int | None
    target: ModelShape
    target_schedule: Schedule
    early_exit_layers: int
    early_exit_weight: float
    drafter: ModelShape
    drafter_schedule: Schedule
    distill_weight: float
    ngram_max_n: int
    ngram_min_n: int
    eval_batches: int
    threads: int
    drafter_refine: Refinement | None = None


FULL = Recipe(
    name="full",
    vocab_size=2048,
    seq_len=256,
    max_context=1024,
    held_out_every=20,
    max_train_chars=None,
    target=ModelShape(hidden_size=384, num_layers=8, num_heads=6, intermediate_size=768),
    target_schedule=Schedule(steps=1200, batch_size=8, learning_rate=2e-3, warmup_steps=30),
    early_exit_layers=2,
    early_exit_weight=0.3,
    drafter=ModelShape(hidden_size=128, num_layers=1, num_heads=4, intermediate_size=384),
    drafter_schedule=Schedule(steps=1200, batch_size=8, learning_rate=3e-3, warmup_steps=30),
    distill_weight=0.7,
    ngram_max_n=4,
    ngram_min_n=1,
    eval_batches=8,
    threads=2,
    drafter_refine=Refinement(Schedule(steps=1500, batch_size=2, learning_rate=1.5e-3, warmup_steps=30),
                              window=1024, eval_prompt_tokens=64, eval_continuation_tokens=192),
)

# The CI-sized family: FULL's recipe with smaller shapes, shorter runs and less text.
QUICK = replace(
    FULL,
    name="quick",
    vocab_size=512,
    seq_len=64,
    max_context=256,
    max_train_chars=300_000,
    target=ModelShape(hidden_size=64, num_layers=3, num_heads=2, intermediate_size=128),
    target_schedule=Schedule(steps=40, batch_size=8, learning_rate=3e-3, warmup_steps=5),
    early_exit_layers=1,
    drafter=ModelShape(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64),
    drafter_schedule=Schedule(steps=40, batch_size=8, learning_rate=3e-3, warmup_steps=5),
    ngram_max_n=3,
    eval_batches=2,
    drafter_refine=Refinement(Schedule(steps=4, batch_size=4, learning_rate=1e-3, warmup_steps=1),
                              window=128, eval_prompt_tokens=16, eval_continuation_tokens=16),
)
