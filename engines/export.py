"""`polyplan export`: from files (the plan, its profile and its models.yaml, then
`planner.engine_export`), and the rendering of an export: what to type (HF `generate` arguments and
snippets, the vLLM command, llama-server's command line), its human report and its JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.planner.engine_export import FULL, EngineExport, EngineOption, check_engine, export_plan, loadable
from polyplan.planner.llama_cpp.ranking import LEVEL, OFF, RankedConfig, ReplayWorkload, llama_cpp_spec_flags
from polyplan.formats.plan import read_plan
from polyplan.engines.llama_cpp.race_agreement import with_race_agreement
from polyplan.engines.llama_cpp.server import repack_flags
from polyplan.formats.profile import PairAgreement, TargetStream, read_profile
from polyplan.models.candidate_file import plan_candidates
from polyplan.models.builtin import builtin_folder

PathLike = str | os.PathLike[str]


def export_from_files(
    plan_path: PathLike, engine: str, *, profile_path: PathLike | None = None, candidates_path: PathLike | None = None,
    in_process: bool = False, workload: ReplayWorkload | None = None, measure: bool = True,
    streams: tuple[TargetStream, ...] | None = None, agreements: tuple[PairAgreement, ...] = (), replay_also=(),
    log=lambda line: None, clients: tuple[int, ...] = (1,),
) -> EngineExport:
    """Export the plan at `plan_path` to `engine` (`planner.engine_export.export_plan`), with the
    profile and models.yaml the plan records unless given. llama.cpp: priced with llama.cpp's own
    numbers (`engines.llama_cpp.prices`) unless `measure` is False, the target's T(k) measured to
    the widths `clients` concurrent requests reach (`engines.load_plan`). `streams` and `agreements`
    replace the profile's, and the server's answers at every count (a race priced on its own
    prompts and answers, `engines.llama_cpp.race_agreement`).

    Raises:
        PolyplanError: unknown engine, unreadable plan or profile, missing or changed model
            files, a target or drafters the engine cannot load.
    """
    check_engine(engine)
    label = str(plan_path)
    plan = read_plan(plan_path)
    candidates = plan_candidates(plan, label, candidates_path)
    if profile_path is None:
        recorded = plan.profile.path
        if recorded is None:
            raise PolyplanError(f"{label}: profile: the plan does not record its profile; pass --profile profile.json")
        profile_path = recorded
        if not Path(profile_path).is_file():
            raise PolyplanError(f"{label}: profile: {profile_path} (recorded in the plan) not found; pass --profile profile.json")
    profile = read_profile(profile_path)
    if profile.target != plan.target:
        raise PolyplanError(f"{profile_path}: target {profile.target!r} is not the plan's target {plan.target!r}")
    files = engine_files(candidates)
    prices, flags = None, ()
    if engine == "llama.cpp":
        flags = repack_flags(candidates.target, files)
        if measure and loadable(engine, candidates.by_name(plan.target), files.get(plan.target))[2] is None:
            from polyplan.engines.llama_cpp.prices import export_prices

            prices = export_prices(plan, profile, candidates, files, flags, log=log, clients=clients)
    if streams is not None:
        profile = profile.with_streams(streams)
        if prices is not None:
            prices = dataclasses.replace(prices, streams=tuple(streams), answers=())  # every count replays these
    for agreement in agreements:
        profile = with_race_agreement(profile, agreement)
    export = export_plan(plan, profile, candidates, engine, files=files, in_process=in_process,
                         workload=workload or ReplayWorkload(), prices=prices, replay_also=replay_also)
    if engine != "llama.cpp":
        return export
    if prices is None:
        export = dataclasses.replace(export, ranking_notes=(
            "priced from the profile and polyplan's loop (--profile-prices)", *export.ranking_notes))
    return dataclasses.replace(export, server_flags=flags)


def engine_files(candidates) -> dict[str, str]:
    """What an engine loads for each candidate whose weights polyplan keeps elsewhere, by name: the
    shipped family's folders, and the GGUF files polyplan made for llama.cpp copies (once made)."""
    from polyplan.formats.candidates import EarlyExit, Quantize, base_chain
    from polyplan.models import gguf_prune, llama_quantize

    files = {}
    for candidate in candidates.candidates:
        if candidate.source_kind == "builtin":
            files[candidate.name] = str(builtin_folder(candidate.source.split(":", 1)[1]))
        elif candidate.engine == "llama.cpp" and isinstance(candidate.derive, (Quantize, EarlyExit)):
            chain = base_chain(candidates, candidate.name)
            path = Path(chain[-1].source)
            for derived in reversed(chain[:-1]):  # root first; a copy not made yet ends the walk
                derive = derived.derive
                path = (llama_quantize.copy_path(path, derive.kind) if isinstance(derive, Quantize)
                        else gguf_prune.copy_path(path, derive.layers))
                if not path.is_file():
                    break
            if path.is_file():
                files[candidate.name] = str(path)
    return files


# --------------------------------------------------------------------------- what to type


def engine_config(export: EngineExport) -> dict | None:
    """The engine's own configuration for the chosen drafter (JSON edge), None without one: HF's
    `generate` keyword arguments, vLLM's `--speculative-config`, llama-server's arguments."""
    option = export.chosen
    if option is None:
        return None
    k = option.block_size
    sampled = export.temperature > 0
    if export.engine == "hf":
        sampling = {"do_sample": True, "temperature": export.temperature} if sampled else {"do_sample": False}
        if option.method == "ngram":
            return {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": option.ngram_sizes[1], **sampling}
        return {
            "assistant_model": option.source,
            "num_assistant_tokens": k,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
            **sampling,
        }
    if export.engine == "vllm":
        if option.method == "ngram":
            low, high = option.ngram_sizes
            return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": high, "prompt_lookup_min": low}
        return {"method": "draft_model", "model": option.source, "num_speculative_tokens": k}
    if export.recommended is not None:  # the ranking's pick (off: the plain server)
        flags = list(export.recommended.flags)
    else:
        flags = llama_cpp_spec_flags(option.method, k, option.source, option.ngram_sizes)
    return {"llama_server_args": ["-m", export.target_source, *flags,
                                  "--temp", f"{export.temperature:g}" if sampled else "0", *export.server_flags]}


_ASSISTANT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def config_text(export: EngineExport) -> str:
    """What to type: Python for HF, the vllm serve option, the llama-server command line."""
    config = engine_config(export)
    if config is None:
        return ""
    if export.engine == "hf":
        arguments = dict(config)
        lines = []
        if "assistant_model" in arguments:
            # transformers reads K, its schedule and the early-exit threshold from the
            # ASSISTANT's generation config (5.x ignores them as generate() arguments)
            source = Path(arguments.pop("assistant_model"))
            where = f"{str(source.parent)!r}, gguf_file={source.name!r}" if source.suffix.lower() == ".gguf" else repr(str(source))
            lines.append(f"assistant = AutoModelForCausalLM.from_pretrained({where})")
            for key in _ASSISTANT_KEYS:
                lines.append(f"assistant.generation_config.{key} = {arguments.pop(key)!r}")
            arguments = {"assistant_model": "assistant", **arguments}
        rendered = ", ".join(f"{key}={value if key == 'assistant_model' else repr(value)}" for key, value in arguments.items())
        lines.append(f"model.generate(**inputs, {rendered})")
        return "\n".join(lines)
    if export.engine == "vllm":
        return f"vllm serve {shlex.quote(export.target_source)} --speculative-config {shlex.quote(json.dumps(config))}"
    return "llama-server " + " ".join(shlex.quote(part) for part in config["llama_server_args"])


def export_lines(export: EngineExport) -> list[str]:
    """The human report of `polyplan export`."""
    chain = " > ".join(export.polyplan_chain)
    lines = [f"engine {export.engine}, target {export.target}, sampling {export.sampling}"]
    option = export.chosen
    if option is not None:
        rule = "full rule, E[sum min(p, q)]" if option.rule == FULL else "engine rule, E[q(argmax p)]"
        lines.append(
            f"best: {option.drafter} ({option.method}) K={option.block_size}: predicted speedup {option.speedup:.2f}x "
            f"(alpha {option.alpha:.3f}, {rule}; {option.prediction.tokens_per_verification[0]:.2f} tokens per target pass)"
        )
        lines.append("  (per decoded token: the long-generation limit, without prefill or per-call set-up)")
        if option.model:
            lines.append(f"  ({option.model})")
        example = export.whole_call_example()
        if example is not None:
            prompt, new, speedup = example
            lines.append(
                f"whole generate calls (what polyplan bench peers measures), {prompt}-token prompt and {new} new tokens: "
                f"predicted {speedup:.2f}x (prefill and per-call cost included)"
            )
            if export.call_note:
                lines.append(export.call_note)
        if export.overhead_note:
            lines.append(export.overhead_note)
        lines.append(
            f"polyplan's chain {chain}: {export.polyplan_speedup:.2f}x; the export "
            + (f"gives up {export.loss:.1%} of it" if export.loss >= 0 else f"is {-export.loss:.1%} faster")
        )
        if option.speedup < 1.0 and export.recommended is None:
            lines.append(f"note: slower than the target alone (1.00x) on {export.engine}: leave speculative decoding off")
        lines += _ranking_lines(export)
        lines += ["", "what to type:"] + ["  " + line for line in config_text(export).splitlines()]
    else:
        lines.append(_unexported_line(export))
    if not export.options:
        return lines
    lines += ["", f"{'drafter':<20} {'method':<12} {'rule':<7} {'alpha':>6} {'K':>3} {'speedup':>8}  note"]
    for item in export.options:
        alpha = "-" if item.alpha is None else f"{item.alpha:.3f}"
        k = "-" if item.block_size is None else str(item.block_size)
        speed = "-" if item.speedup is None else f"{item.speedup:.2f}x"
        note = item.reason if item.reason is not None else ("exported" if item is option and _is_exported(export, item) else "")
        lines.append(f"{item.drafter[:20]:<20} {item.method or '-':<12} {item.rule:<7} {alpha:>6} {k:>3} {speed:>8}  {note}")
    return lines


def _is_exported(export: EngineExport, option: EngineOption) -> bool:
    """Whether the command printed runs `option` (llama.cpp: its ranking may recommend another, or off)."""
    if export.recommended is None:
        return True
    return list(export.recommended.flags) == llama_cpp_spec_flags(option.method, option.block_size, option.source, option.ngram_sizes)


def _ranking_lines(export: EngineExport) -> list[str]:
    """llama.cpp: every configuration predicted, fastest first, and the recommendation."""
    if not export.ranking:
        return []
    lines = ["", f"llama-server configurations, predicted decode speedup over the target alone [{LEVEL:.0%} interval for a new "
             f"prompt set] [{LEVEL:.0%} interval for the workload's mean]:"]
    lines += [f"  ({note})" for note in export.ranking_notes]
    for config in export.ranking:
        counts = "" if config.drafted is None else f"drafted {config.drafted}, accepted {config.accepted}"
        mark = "  <- recommended" if config is export.recommended else ""
        lines.append(f"  {config.label[:40]:<40} {config.text():>20} {_bounds(config.workload_interval):>14}  {counts or config.note}{mark}")
    best = export.recommended
    if best is not None and best.label == OFF:
        lines.append("recommended: off: no configuration beats the target alone beyond its interval for the workload's mean")
    elif best is not None:
        lines.append(f"recommended: {best.label}, {best.text()}, the workload's mean {_bounds(best.workload_interval or best.interval)}")
    return lines


def _bounds(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def _unexported_line(export: EngineExport) -> str:
    """The one line of an export that chose no drafter: run the target alone, and why."""
    return (f"best: {export.target} alone: no drafter of the plan can run on {export.engine} ({export.unexported}); "
            f"leave speculative decoding off (polyplan's chain {' > '.join(export.polyplan_chain)}: "
            f"{export.polyplan_speedup:.2f}x)")


def export_to_json(export: EngineExport) -> dict:
    """The JSON object of `polyplan export --json`."""

    def option_json(item: EngineOption) -> dict:
        prediction = item.prediction
        return {
            "drafter": item.drafter,
            "method": item.method or None,
            "rule": item.rule,
            "alpha": item.alpha,
            "block_size": item.block_size,
            "predicted_speedup": item.speedup,
            "tokens_per_target_pass": None if prediction is None else prediction.tokens_per_verification[0],
            "source": item.source or None,
            "exportable": item.reason is None,
            "reason": item.reason,
            "prediction_model": item.model or None,
        }

    chosen = export.chosen
    return {
        "engine": export.engine,
        "target": export.target,
        "target_source": export.target_source,
        "sampling": export.sampling,
        "chosen": None if chosen is None else option_json(chosen),
        "config": engine_config(export),
        "command": config_text(export) or None,
        "polyplan": {"chain": list(export.polyplan_chain), "predicted_speedup": export.polyplan_speedup},
        "loss": export.loss,
        "whole_call_example": _example_json(export),
        "overhead": export.overhead_note or None,
        "options": [option_json(item) for item in export.options],
        "ranking": [_ranked_json(item) for item in export.ranking],
        "recommended": None if export.recommended is None else _ranked_json(export.recommended),
        "ranking_notes": list(export.ranking_notes),
        "unexported": export.unexported or None,
    }


def _ranked_json(item: RankedConfig) -> dict:
    return {"label": item.label, "flags": list(item.flags), "predicted_speedup": item.speedup,
            "interval": None if item.interval is None else list(item.interval), "drafted": item.drafted,
            "accepted": item.accepted, "note": item.note}


def _example_json(export: EngineExport) -> dict | None:
    example = export.whole_call_example()
    if example is None:
        return None
    prompt, new, speedup = example
    return {"prompt_tokens": prompt, "new_tokens": new, "predicted_speedup": speedup, "note": export.call_note or None}
