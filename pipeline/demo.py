"""`polyplan demo`'s settings: the closed loop on the embedded family, profile → recommend → validate.

`pipeline.stages.run_demo` runs the loop; this module says on what: the candidates (default
`examples/zoo.yaml`, the shipped family), the profiling settings, and the prompts. `quick=True`
reduces the profiling settings (CI-sized) and, unless candidates are given, swaps in the tiny
family of `polyplan zoo train --quick` (trained once into the cache), whose 256-token context
the built-in prompts are cut to fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.cache import cache_root
from polyplan.formats.candidates import default_candidates_path
from polyplan.formats.errors import PolyplanError
from polyplan.profiler.forward_timing import LatencySettings
from polyplan.profiler.prompt_sets import PromptSet, prompt_set, validation_prompt_set
from polyplan.profiler.prompts import read_prompt_file
from polyplan.profiler.settings import AcceptanceSettings, ProfileSettings

_QUICK_FOLDER = "quick-family"
PLAN_FILE = "plan.json"
_QUICK_NOISE_BUDGET_S = 2.0  # --quick: a CI-sized run's seconds per context on a noisy floor


@dataclass(frozen=True)
class DemoSettings:
    """What `polyplan demo` runs (defaults: the full demo on the shipped family)."""

    candidates: Path | None = None  # None: examples/zoo.yaml, or the quick family with `quick`
    quick: bool = False  # reduced profiling settings (and the quick family without `candidates`)
    prompts_per_kind: int = 4  # validation prompts of each of the 4 kinds
    new_tokens: int = 128
    repeats: int = 3
    top: int = 3
    max_levels: int = 4
    out: Path = Path("polyplan-demo")
    cache_dir: Path | None = None
    prompts: Path | None = None  # a prompt file: odd-numbered prompts profile, even-numbered validate
    raw_prompts: bool = False  # never wrap prompts in the target's chat template


def profile_settings(quick: bool, new_tokens: int) -> ProfileSettings:
    """Greedy only (the demo validates greedy decoding), acceptance measured over continuations as
    long as the validated generations (`new_tokens`), since agreement changes along a generation
    (docs/cost-model.md, "The answer length"); smaller everything for the quick family."""
    if quick:
        return ProfileSettings(
            latency=LatencySettings(ks=(1, 2, 4, 8), context_lengths=(32, 96), repeats=5, warmup=1, prefill_repeats=2,
                                    noise_budget_s=_QUICK_NOISE_BUDGET_S),
            acceptance=AcceptanceSettings(
                temperatures=(0.0,), block_sizes=(2,), new_tokens=new_tokens, decoded_prompts=2, resamples=200
            ),
        )
    return ProfileSettings(acceptance=AcceptanceSettings(temperatures=(0.0,), new_tokens=new_tokens, decoded_prompts=4))


def _quick_candidates(cache_dir: Path | None, log=lambda line: None) -> Path:
    """models.yaml of the quick family in the cache, training it first if it is not there."""
    from polyplan.zoo.recipe import QUICK
    from polyplan.zoo.train import train_family

    folder = cache_root(cache_dir) / _QUICK_FOLDER
    if not (folder / "family.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        if folder.exists():
            raise PolyplanError(f"--cache-dir: {folder} exists but holds no trained family; remove it")
        log(f"training the quick family into {folder} (once)")
        train_family(QUICK, folder, seed=0, log=lambda line: None)
    candidates = folder / "models.yaml"
    candidates.write_text(
        "candidates:\n"
        "  - {name: target, source: ./target, target: true, dtype: float32, device: cpu}\n"
        "  - {name: target-int8, derive: {from: target, quantize: int8}}\n"
        "  - {name: drafter, source: ./drafter}\n"
        f"  - {{name: target-exit{QUICK.early_exit_layers}, derive: {{from: target, layers: {QUICK.early_exit_layers}}}}}\n"
        f"  - {{name: ngram, derive: {{kind: ngram, max_n: {QUICK.ngram_max_n}, min_n: {QUICK.ngram_min_n}}}}}\n",
        encoding="utf-8",
    )
    return candidates


def typical_context(prompts, new_tokens: int) -> int:
    """The mean number of cached tokens while decoding: prompt length + half the new tokens
    (the latency curves are read there; T_i(k) grows with the context)."""
    return round(sum(len(prompt.ids) for prompt in prompts) / len(prompts) + new_tokens / 2)


def demo_prompt_sets(settings: DemoSettings) -> tuple[PromptSet, PromptSet]:
    """The prompts that profile and the held-out prompts that validate: built-in ones, or the
    user's file split alternately, so that both halves cover its categories alike."""
    raw = settings.raw_prompts
    if settings.prompts is None:
        return prompt_set(per_kind=1 if settings.quick else 4, raw=raw), validation_prompt_set(per_kind=settings.prompts_per_kind, raw=raw)
    prompts = read_prompt_file(settings.prompts)
    if len(prompts) < 2:
        raise PolyplanError(f"{settings.prompts}: the demo needs at least 2 prompts (one to profile, one to validate)")
    source = str(settings.prompts)
    return (PromptSet(prompts[0::2], f"{source} (prompts 1, 3, 5, …)", False, raw),
            PromptSet(prompts[1::2], f"{source} (prompts 2, 4, 6, …, held out from profiling)", False, raw))


def demo_candidates(settings: DemoSettings, log=lambda line: None) -> Path:
    """The models.yaml the demo runs on: the given one, the quick family, or the shipped family."""
    if settings.candidates is not None:
        return Path(settings.candidates)
    return _quick_candidates(settings.cache_dir, log) if settings.quick else default_candidates_path()


def check_settings(settings: DemoSettings) -> None:
    """Every option and the --out folder, before anything is trained, profiled or decoded."""
    from polyplan.formats import options
    from polyplan.validation.report_folder import check_validation_folder, is_plan

    options.at_least(settings.max_levels, 1, "--max-levels")
    options.at_least(settings.top, 0, "--top")
    options.at_least(settings.new_tokens, 2, "--new-tokens")
    options.at_least(settings.repeats, 1, "--repeats")
    options.at_least(settings.prompts_per_kind, 1, "--prompts-per-kind")
    check_validation_folder(
        Path(settings.out), [("--candidates", settings.candidates)],
        own_files={PLAN_FILE: is_plan},
    )
