"""`polyplan profile`: measure T_i(k), pairwise acceptance and the loop costs of the candidates into a
profile, through the loop's one profiling entry point (`pipeline.stages.profile_candidates`)."""

from __future__ import annotations

import dataclasses

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.support import echo_json, fails_cleanly
from polyplan.cli.commands.options import Candidates, RawPrompts
from polyplan.formats.errors import PolyplanError


def _numbers(text: str, option: str, kind: type) -> tuple:
    try:
        values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise PolyplanError(f"{option}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise PolyplanError(f"{option}: give at least one value")
    return values


def _check_up_front(out, candidates, prompts, max_prompts, device, seed, repeats, warmup, latency_ks, block_sizes) -> None:
    """Options and the output path, before a prompt is read or a model loaded."""
    from polyplan.formats import options
    from polyplan.formats.outputs import check_output_file

    options.at_least(max_prompts, 1, "--max-prompts")
    options.at_least(repeats, 1, "--repeats")
    options.at_least(warmup, 0, "--warmup")
    options.seed(seed)
    for k in _numbers(latency_ks, "--latency-ks", int):
        options.block_size(k, "--latency-ks")
    for k in _numbers(block_sizes, "--block-sizes", int):
        options.block_size(k, "--block-sizes")
    check_output_file(out, "--out", inputs=[("--candidates", candidates), ("--prompts", prompts)])
    if device is not None:
        from polyplan.models.devices import check_device

        check_device(device)


@fails_cleanly
def profile(
    candidates: Candidates = None,
    out: Annotated[Path, typer.Option("--out", help="Profile JSON to write (resumed when it exists).")] = Path("profile.json"),
    prompts: Annotated[Optional[Path], typer.Option(
        "--prompts", help="Prompt file: *.jsonl (strings, or objects with turns/prompt/text) or text (blank-line "
        "separated). Default: the file the --out profile being resumed was measured on, else the built-in held-out "
        "Python snippets.")] = None,
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", help="Use only the first N prompts.")] = None,
    raw_prompts: RawPrompts = False,
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="Tokens the target generates per prompt (the contexts acceptance is measured on; as long as the chains will generate: validate's default).")] = 128,
    block_sizes: Annotated[str, typer.Option("--block-sizes", help="K for the decoded mu, comma-separated.")] = "2,4",
    temperatures: Annotated[str, typer.Option("--temperatures", help="Sampling modes, comma-separated (0 = greedy).")] = "0,1",
    decoded_prompts: Annotated[Optional[int], typer.Option(
        "--decoded-prompts", help="Prompts per decoded run: the first N (default: all).")] = None,
    decoded_verifications: Annotated[int, typer.Option(
        "--decoded-verifications", help="A decoded run stops taking prompts once it has this many verifications from "
        "at least 4 prompts (0: use every prompt).")] = 160,
    decoded: Annotated[bool, typer.Option("--decoded/--no-decoded", help="Measure the decoded mu (the slow part).")] = True,
    latency_ks: Annotated[str, typer.Option("--latency-ks", help="k of T(k), comma-separated.")] = "1,2,3,4,6,8,12,16",
    context_lengths: Annotated[str, typer.Option("--context-lengths", help="Cached tokens for T(k), comma-separated.")] = "128,384",
    repeats: Annotated[int, typer.Option("--repeats", help="Timed repeats per latency point.")] = 15,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed warm-up rounds per context length.")] = 3,
    max_noise: Annotated[
        float, typer.Option("--max-noise", help="Acceptable machine floor: IQR/median of a fixed workload timed in the same rounds.")
    ] = 0.10,
    noise_budget: Annotated[float, typer.Option(
        "--noise-budget", help="Extra seconds per context length for more rounds while the floor is above "
        "--max-noise, unless the models' own timings show it overstating their noise (0: never; when it runs out "
        "the profile and the plan say so).")] = 20.0,
    device: Annotated[Optional[str], typer.Option("--device", help="Put every model on this device (default: as in models.yaml).")] = None,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", help="torch CPU threads (default: as --out was measured, else the machine's free cores at "
        "start, from the load average; 0 keeps torch's choice).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Prompt i is sampled with seed + i.")] = 0,
    budget: Annotated[Optional[str], typer.Option(
        "--budget", help="Wall time the run may take, e.g. 5m, 90s, 1h30m (default: none, measure everything asked). "
        "After the latency curves the acceptance is measured on the prompts that fit, decoded runs while they fit; "
        "what it left out is printed.")] = None,
    sequential: Annotated[bool, typer.Option(
        "--sequential/--all-prompts", help="Measure acceptance in rounds of 4, 8, 16, ... prompts and stop once more "
        "prompts cannot change which chain ranks first (recommend --candidates and demo do this by default; "
        "default here: every prompt).")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
) -> None:
    """Measure latency curves, pairwise acceptance and what the exact model reads besides (the
    agreement runs, the loop overhead, the switch costs); write OUT after every measurement.

    A rerun reuses every entry whose models and settings are unchanged and measures the rest.
    """
    from polyplan.cli.commands.progress import progress_bars
    from polyplan.formats.candidates import default_candidates_path
    from polyplan.pipeline.stages import profile_candidates
    from polyplan.profiler.forward_timing import LatencySettings
    from polyplan.profiler.prompt_sets import named_prompt_set
    from polyplan.profiler.settings import AcceptanceSettings, ProfileSettings

    _check_up_front(out, candidates, prompts, max_prompts, device, seed, repeats, warmup, latency_ks, block_sizes)
    from polyplan.profiler.budget import parse_budget

    parsed_budget = None if budget is None else parse_budget(budget)
    if not decoded:
        from polyplan.formats.options import unused_without

        unused_without("--decoded", [("--decoded-prompts", decoded_prompts)], "--no-decoded measures no decoded mu")
    settings = ProfileSettings(  # the options, parsed once into the run's settings objects
        latency=LatencySettings(
            ks=_numbers(latency_ks, "--latency-ks", int), context_lengths=_numbers(context_lengths, "--context-lengths", int),
            repeats=repeats, warmup=warmup, max_noise=max_noise, noise_budget_s=noise_budget,
        ),
        acceptance=AcceptanceSettings(
            temperatures=_numbers(temperatures, "--temperatures", float), block_sizes=_numbers(block_sizes, "--block-sizes", int),
            new_tokens=new_tokens, decoded_prompts=decoded_prompts, decoded_verifications=decoded_verifications or None,
            decoded=decoded, seed=seed,
        ),
    )
    choice = _set_threads(threads, out)
    with progress_bars() as progress:  # on stderr, --json or not
        profiled = profile_candidates(
            candidates or default_candidates_path(), profile_path=out, settings=settings, device=device, keep_foreign=False,
            prompts=named_prompt_set(prompts, max_prompts=max_prompts, raw=raw_prompts, strict=True), progress=progress.profile,
            budget=parsed_budget, sequential=sequential,
        )
    overheads = _bindings_overheads(profiled)
    if json_output:
        echo_json({**_run_json(profiled), "bindings_overhead": [dataclasses.asdict(o) | {"relative": o.relative} for o in overheads],
                   "threads": None if choice is None else dataclasses.asdict(choice)})
        return
    typer.echo("\n".join(_run_lines(profiled) + _bindings_lines(overheads) + ([] if choice is None else [choice.line])))


def _bindings_overheads(profiled) -> list:
    """llama.cpp members only: what a one-token forward costs against llama.cpp's own decode."""
    from polyplan.decoder.llama_cpp import LlamaCppMember
    from polyplan.profiler.bindings_overhead import measure_bindings_overhead

    members = [model.member for model in profiled.models if isinstance(model.member, LlamaCppMember)]
    if not members:
        return []
    prompt = profiled.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 4)
    return [measure_bindings_overhead(member, prompt) for member in members]


def _bindings_lines(overheads) -> list[str]:
    if not overheads:
        return []
    lines = ["\nllama.cpp members: a one-token forward against llama.cpp's own decode of it (llama_perf_context), mean of "
             f"{overheads[0].steps} steps:"]
    lines += [f"  {o.member:24s} forward {1000 * o.forward_s:7.2f} ms  llama.cpp decode {1000 * o.llama_decode_s:7.2f} ms  "
              f"bindings {100 * o.relative:+.1f}%" for o in overheads]
    return lines


def _set_threads(threads: int | None, out: Path | None):
    """--threads (0 keeps torch's choice: None returned), else the resumed profile's, else the
    machine's free cores; the `ThreadChoice` is printed with the results."""
    if threads is not None and threads < 0:
        raise PolyplanError(f"--threads: must be >= 0, got {threads}")
    if threads == 0:
        return None
    from polyplan.profiler.profile_cache import resumed_threads
    from polyplan.profiler.threads import choose_threads, set_threads

    choice = choose_threads(threads, resumed_threads(out))
    set_threads(choice)
    return choice


def _run_lines(profiled) -> list[str]:
    """The closing table, the timing warnings and what the run did."""
    from polyplan.cli.commands.recommend import warning_lines
    from polyplan.planner.intervals.timing_health import timing_warnings
    from polyplan.profiler.summary import summary_lines

    profile, run = profiled.profile, profiled.run
    lines = summary_lines(profile) + warning_lines(timing_warnings(profile))
    others = [name for name in profile.model_names() if name not in {model.name for model in profiled.models}]
    if others:
        lines.append(f"\nkept the entries of {len(others)} model(s) outside these candidates: {', '.join(others)}")
    phases, loop = run.phases, profiled.loop_costs
    lines.append(
        f"\nwrote {profiled.path}: {len(run.measured)} entries measured, {len(run.reused)} reused in "
        f"{profiled.wall_time_s:.1f} s (latency {phases.latency:.1f} s, alpha {phases.alpha:.1f} s, "
        f"decoded {phases.decoded:.1f} s; {loop.measured} loop-cost entries measured in {loop.seconds:.1f} s: agreement runs "
        f"{loop.agreement_s:.1f} s, loop overhead {loop.loop_overhead_s:.1f} s, HF overhead {loop.hf_overhead_s:.1f} s, "
        f"switch costs {loop.switch_costs_s:.1f} s)"
    )
    return lines


def _run_json(profiled) -> dict:
    """`profile --json`: the run's entries, its timing warnings and the closing table's rows."""
    from polyplan.planner.intervals.timing_health import timing_warnings
    from polyplan.profiler.summary import model_rows, pair_rows

    profile, run, loop = profiled.profile, profiled.run, profiled.loop_costs
    return {
        "profile": str(profiled.path),
        "measured": [step.label for step in run.measured],
        "reused": [step.label for step in run.reused],
        "loop_costs_measured": loop.measured,
        "loop_costs_seconds": {"agreement_runs": loop.agreement_s, "loop_overhead": loop.loop_overhead_s,
                               "hf_overhead": loop.hf_overhead_s, "switch_costs": loop.switch_costs_s},
        "wall_time_s": profiled.wall_time_s,
        "warnings": list(timing_warnings(profile)),
        "phase_seconds": {"latency": run.phases.latency, "alpha": run.phases.alpha, "decoded": run.phases.decoded},
        "stage_seconds": dict(profiled.stage_seconds),
        "bounded": list(run.bounded),
        "budget": list(run.budget_lines()),
        "models": [{"name": r.name, "step_s": r.step_s, "relative_iqr": r.relative_iqr, "reference_relative_iqr": r.reference_relative_iqr}
                   for r in model_rows(profile)],
        "pairs": [_pair_json(r) for r in pair_rows(profile)],
    }


def _pair_json(row) -> dict:
    payload = dataclasses.asdict(row)
    payload["speedup_at_best_k"] = payload.pop("speedup")
    return payload
