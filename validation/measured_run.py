"""A measured run as `docs/results/` keeps it: profile.json with, where they exist, plan.json and
report.json beside it. `read_run` is the one place the notebooks read these files;
`MeasuredRun.insertions` pairs validated chains with and without a model between two neighbours.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from polyplan.formats.plan import PlanFile, read_plan
from polyplan.formats.profile import Profile
from polyplan.formats.profile import read_profile
from polyplan.formats.validation_report import ReportChain, ValidationReport, read_report

PLAN_FILE = "plan.json"
REPORT_FILE = "report.json"


@dataclass(frozen=True)
class MeasuredInsertion:
    """Two validated chains: `with_chain` holds `middle` between `upper` and `lower`, and
    `without_chain` is the same chain without it (each at its own planned block sizes)."""

    upper: str
    middle: str
    lower: str
    with_chain: ReportChain
    without_chain: ReportChain

    @property
    def measured_delta(self) -> float:
        """Measured speedup with `middle` minus without it (over target-only decoding)."""
        return float(self.with_chain.measured_speedup) - float(self.without_chain.measured_speedup)

    @property
    def predicted_delta(self) -> float:
        """The exact model's speedup with `middle` minus without it, as the plan predicted them."""
        return self.with_chain.predicted_speedup.exact - self.without_chain.predicted_speedup.exact


@dataclass(frozen=True)
class MeasuredRun:
    """A profile with, where they sit beside it, its plan and its validation report."""

    profile_path: Path
    profile: Profile
    plan: PlanFile | None
    report: ValidationReport | None

    def validated(self, chain: Sequence[str]) -> ReportChain | None:
        """The report's chain `chain` (target first) when it was validated with a measured
        speedup; None otherwise (no report, not validated, or lossy)."""
        if self.report is None:
            return None
        wanted = tuple(chain)
        return next((entry for entry in self.report.chains
                     if entry.chain == wanted and entry.measured_speedup is not None), None)

    def insertions(self, triple: Sequence[str]) -> tuple[MeasuredInsertion, ...]:
        """Every pair of validated chains in which `middle` of the (upper, middle, lower) `triple`
        is inserted between `upper` and `lower`, in the report's order."""
        upper, middle, lower = triple
        found = []
        for entry in () if self.report is None else self.report.chains:
            chain = entry.chain
            if middle not in chain[1:-1] or entry.measured_speedup is None:
                continue
            position = chain.index(middle)
            if (chain[position - 1], chain[position + 1]) != (upper, lower):
                continue
            without = self.validated(chain[:position] + chain[position + 1:])
            if without is not None:
                found.append(MeasuredInsertion(upper, middle, lower, entry, without))
        return tuple(found)


def read_run(profile: str | os.PathLike[str]) -> MeasuredRun:
    """The profile at `profile`, with the plan.json and report.json beside it where they exist."""
    path = Path(profile)
    plan, report = read_plan_and_report(path.parent)
    return MeasuredRun(profile_path=path, profile=read_profile(path), plan=plan, report=report)


def read_plan_and_report(folder: str | os.PathLike[str]) -> tuple[PlanFile | None, ValidationReport | None]:
    """The folder's plan.json and report.json, each None where the folder has none."""
    plan_path, report_path = Path(folder) / PLAN_FILE, Path(folder) / REPORT_FILE
    return (read_plan(plan_path) if plan_path.is_file() else None,
            read_report(report_path) if report_path.is_file() else None)
