"""report.json is pinned byte for byte: a validation built from fixed run records (no model, no
planner: the planned chains are written out here) is written by `write_report`, and the file must
equal `tests/data/report_v1.json` (the report folder's path replaced by `FOLDER`). The fixture was
saved before the report's codec moved into `formats.validation_report`; it keeps every report.json that
polyplan writes for the same result the same bytes, whoever builds the JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyplan.decoder.result import PassTally
from dataclasses import replace

from polyplan.formats.plan import ChainCheck, ExactRecord, PaperRecord, PlannedChain
from polyplan.formats.validation_report import CategoryEntry, ChainCategoryRows, ReportSettings
from polyplan.validation.categories import chain_categories
from polyplan.validation.reporting import write_report
from polyplan.validation.results import (
    ROLE_ALTERNATIVE,
    ROLE_RECOMMENDED,
    ROLE_TARGET_ONLY,
    ROLE_TWO_MODEL,
    ChainSpec,
    RunRecord,
    Validation,
    headline,
    summarise_chain,
)

EXPECTED = Path(__file__).parent / "data" / "report_v1.json"
PROMPTS, REPEATS = 3, 2
KINDS = ("code", "writing", "code")


def _planned(chain, blocks, exact, paper, alphas, interval):
    n = len(chain)
    return PlannedChain(
        chain=tuple(chain), block_sizes=tuple(blocks),
        exact=ExactRecord(
            speedup=exact, acceptances=tuple(alphas),
            forwards_per_token=tuple(1.0 / (i + 1.5) if i else 0.45 for i in range(n)) if n > 1 else (1.0,),
            tokens_per_verification=tuple(1.0 + 1.2 * a for a in alphas),
            drafted_per_verification=tuple(float(k) * 0.9 for k in blocks),
            time_per_token_s=tuple(0.02 / (i + 1) ** 2 for i in range(n)),
            overhead_per_token_s=1.25e-4 if n > 1 else 0.0,
            interval=interval,
        ),
        paper=PaperRecord(speedup=paper, phi_per_token=tuple(1.0 / (i + 1.25) for i in range(n)),
                          mean_lengths=tuple(1.0 + 1.5 * a for a in alphas)),
    )


SPECS = (
    ChainSpec(_planned(("t", "m", "d"), (4, 2), 2.31, 3.07, (0.81, 0.66), (2.05, 2.58)), (ROLE_RECOMMENDED,), 1),
    ChainSpec(replace(_planned(("t", "d"), (3,), 1.94, 2.45, (0.58,), (1.71, 2.2)),  # recommend's self-check ran on it
                      check=ChainCheck(1.25, 1.125, 1.375, 1.552, (1.244, 1.956), 1.6)), (ROLE_ALTERNATIVE, ROLE_TWO_MODEL), 2),
    ChainSpec(_planned(("t", "m"), (5,), 1.52, 1.88, (0.9,), None), (ROLE_ALTERNATIVE,), 3),
    ChainSpec(_planned(("t",), (), 1.0, 1.0, (), (1.0, 1.0)), (ROLE_TARGET_ONLY,), 4),
)
BASELINE = 3
SPEEDS = (2.0, 2.1, 1.4, 1.0)  # per spec: how much faster than target-only it decodes (the two-model chain fastest)


def _run(chain: int, repeat: int, prompt: int) -> RunRecord:
    levels = len(SPECS[chain].planned.chain)
    base = 1.0 + 0.1 * prompt + 0.05 * repeat
    wobble = 1.0 + 0.03 * ((prompt + 2 * repeat + chain) % 3 - 1) if chain != BASELINE else 1.0
    decode = base / SPEEDS[chain] * wobble
    tokens = tuple(range(10 + prompt, 18 + prompt))
    if chain == 2 and prompt == 1 and repeat == 1:  # lossy: leaves target-only's output at token 5
        tokens = tokens[:4] + (99,) + tokens[5:]
    verifying = levels - 1
    return RunRecord(
        chain=chain, repeat=repeat, prompt=prompt, decode_s=decode, prefill_s=0.01 * (prompt + 1),
        token_ids=tokens,
        forward_passes=tuple(8 if levels == 1 else 3 + 2 * i + (prompt + repeat) % 2 for i in range(levels)),
        forward_seconds=tuple(decode * (0.6 if i == 0 else 0.3 / verifying) for i in range(levels)),
        tokens_per_verification=tuple((2 + (prompt + i) % 3, 3, 1 + repeat) for i in range(verifying)) + ((),),
        tokens_drafted=tuple(6 + prompt + i for i in range(verifying)) + (0,),
        tokens_accepted=tuple(3 + (prompt + repeat + i) % 3 for i in range(verifying)) + (0,),
        passes=tuple((PassTally(1, 1, 0.004, 20.0 + prompt), PassTally(3 + i, 2 + (prompt + repeat) % 2, 0.009, 40.0))
                     for i in range(levels)),
    )


def _price(model: str, width: int, context: float) -> float:
    """A profile's T(width) at `context`, made up: each model costs less than the one above it."""
    return {"t": 0.004, "m": 0.002, "d": 0.0005}[model] * (1.0 + 0.05 * width) * (1.0 + context / 1000)


def fixed_validation() -> Validation:
    """A greedy validation of four chains (one lossy, one without a predicted interval) over 3
    prompts x 2 repeats, re-timed, with per-category rows (one of them undefined: NaN)."""
    records = [_run(chain, repeat, prompt) for repeat in range(REPEATS) for prompt in range(PROMPTS) for chain in range(4)]
    base = [run for run in records if run.chain == BASELINE]
    chains = tuple(
        summarise_chain(spec, [run for run in records if run.chain == index], base, greedy=True,
                        retimed=None if index == BASELINE else spec.planned.exact.speedup * 0.97,
                        reaccepted=None if index in (BASELINE, 2) else spec.planned.exact.speedup * 0.93,
                        predicted_baseline=0.021, price=_price)
        for index, spec in enumerate(SPECS)
    )
    categories = chain_categories(SPECS, records, KINDS, BASELINE) + (
        ChainCategoryRows("t > empty", (CategoryEntry("none", 0, None, None),)),
    )
    settings = ReportSettings(
        sampling="greedy", prompts=PROMPTS, prompt_sources=("builtin:1", "builtin:2", "builtin:3"), dropped_prompts=("builtin:9",),
        truncated_prompts=1, new_tokens=8, repeats=REPEATS, seed=7, device="cpu (2 threads)", plan_device="cpu (2 threads)",
        plan="plan.json", wall_time_s=12.5, exact_model="exact model with the loop's costs",
    )
    return Validation(chains=chains, headline=headline(chains), settings=settings, notes=("a note from the plan",),
                      categories=categories)


def written_report(folder: Path) -> str:
    """report.json as `write_report` writes it for `fixed_validation`, the folder's path as FOLDER."""
    files = write_report(fixed_validation(), folder)
    return files.json.read_text(encoding="utf-8").replace(str(folder), "FOLDER")


def test_report_json_is_byte_identical_to_the_saved_report(tmp_path):
    text = written_report(tmp_path / "report")
    assert "NaN" not in text and '"speedup": null' in text  # the undefined category row is null
    assert text == EXPECTED.read_text(encoding="utf-8")


@pytest.mark.parametrize("index", range(4))
def test_the_fixture_covers_every_kind_of_chain(index):
    validation = fixed_validation()
    chain = validation.chains[index]
    assert chain.lossless == (index != 2)
    assert (chain.measured.paired is not None) and len(chain.measured.prompts) == PROMPTS
    assert (chain.predicted.interval is None) == (index == 2)
    assert validation.headline.record.fastest == validation.chains[1].label()
    assert validation.headline.record.fastest_over_recommended is not None
