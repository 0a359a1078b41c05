"""A plan's draft policy on llama-server: the confidence stop it carries, the adaptive cap it cannot.

llama-server's `draft-simple` (common/speculative.cpp, `common_speculative_impl_draft_simple::draft`)
stops a draft where the draft model's top probability over its 10 best tokens falls below
`--spec-draft-p-min`, and has no adaptive cap. Its rounds are `planner.exact.policy_replay.walk`
at a fixed cap, replayed on what the server compares (`server_view`: the 10-best confidences);
an adaptive cap is replaced by the best fixed K, with one line saying so (`policy_notes`).
The server's rule in full: docs/engines.md, "A plan's draft policy". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import DraftPolicy, PlanFile
from polyplan.formats.profile import Profile
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.policy_replay import model_rounds
from polyplan.planner.exact.runs import profile_runs
from polyplan.planner.llama_cpp.ngram_rules import spec_options

GREEDY = "greedy"


def plan_policy(plan: PlanFile) -> tuple[str, DraftPolicy] | None:
    """(the drafter it belongs to, the policy) of the plan's own chain; None without one."""
    policy = plan.best.draft_policy
    if policy is None or len(plan.chain) < 2 or (not policy.adaptive and policy.p_min is None):
        return None
    return plan.chain[-1], policy


def server_policy(policy: DraftPolicy) -> DraftPolicy | None:
    """What llama-server can run of `policy`: its confidence stop alone (None: nothing)."""
    return None if policy.p_min is None else DraftPolicy(p_min=policy.p_min)


def server_view(profile: Profile, target: str, drafter: str) -> tuple[Profile, tuple[str, ...]]:
    """`profile` with the pair's confidences replaced by the 10-best ones
    (`PairAgreement.confidence_top10`), so that every replay of the stop compares what the server
    compares; with one line where the profile keeps none (the whole-vocabulary ones, never above
    them, then stop no later than the server). Unchanged where the pair keeps no confidences."""
    entry = profile.acceptance_runs.get(GREEDY)
    pair = None if entry is None else next((p for p in entry.pairs if (p.verifier, p.drafter) == (target, drafter)), None)
    if pair is None or not pair.confidence:
        return profile, ()
    if not pair.confidence_top10:
        return profile, (f"{drafter}'s confidence stop: replayed on its top probabilities over the whole vocabulary, as the "
                         f"profile keeps no 10-best ones (llama-server's; re-run polyplan profile): it may draft fewer tokens "
                         f"than the server",)
    server = replace(pair, confidence=pair.confidence_top10)
    pairs = tuple(server if p is pair else p for p in entry.pairs)
    return replace(profile, acceptance_runs={**profile.acceptance_runs, GREEDY: replace(entry, pairs=pairs)}), ()


def policy_rounds(profile: Profile, target: str, drafter: str, p_min: float) -> Callable[[int], DraftRounds]:
    """The drafter's rounds under llama-server's confidence stop as a function of the fixed cap K,
    replayed on the pair's greedy agreement sequences and the confidences `profile` keeps.

    Raises:
        PolyplanError: the profile keeps no agreement sequences or no confidences for the pair.
    """
    sequences = profile_runs(profile, GREEDY).get((target, drafter))
    if not sequences:
        raise PolyplanError(f"{target} > {drafter}: the profile keeps no greedy agreement sequences to replay p_min on")
    entry = profile.acceptance_runs.get(GREEDY)
    confidences = None if entry is None else entry.confidences_by_pair().get((target, drafter))
    if confidences is None:
        raise PolyplanError(f"{target} > {drafter}: the profile keeps no drafter confidences to replay p_min on "
                            "(re-run polyplan profile)")
    policy = DraftPolicy(p_min=p_min)
    return lambda k: model_rounds(sequences, k, policy, confidences)


_DRAFT_SIMPLE_DEFAULTS = (3, 0, 0.0)  # --spec-draft-n-max, -n-min, -p-min where not given (the pinned build's --help)


@dataclass(frozen=True)
class DraftSimpleFlags:
    """What a `draft-simple` server's flags ask for: the draft model's file, its cap (n-max), the
    shortest draft it keeps (n-min) and its confidence stop (p-min), defaults filled in."""

    source: str
    n_max: int
    n_min: int
    p_min: float

    @property
    def policy(self) -> DraftPolicy | None:
        """The rounds' policy: None for exactly n-max tokens a round (p-min 0: the stop never
        cuts a draft short, whatever n-min), else the confidence stop at p-min."""
        return None if self.p_min == 0.0 else DraftPolicy(p_min=self.p_min)

    @property
    def modelled(self) -> bool:
        """Whether the replay models it: a fixed cap, or the stop with every short draft kept
        (a draft shorter than 0 < n-min is discarded whole, which no replay here models)."""
        return self.n_max >= 1 and (self.p_min == 0.0 or self.n_min == 0)


def draft_simple_flags(flags) -> DraftSimpleFlags | None:
    """`flags` (after `-m TARGET`) read as one `draft-simple` draft model; None for anything else
    (`planner.llama_cpp.ngram_rules.spec_options`: a combination such as `draft-simple,ngram-mod`)."""
    options = spec_options(flags, "draft-simple", {"-md", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min"})
    if options is None or "-md" not in options:
        return None
    try:
        n_max = int(options.get("--spec-draft-n-max", _DRAFT_SIMPLE_DEFAULTS[0]))
        n_min = int(options.get("--spec-draft-n-min", _DRAFT_SIMPLE_DEFAULTS[1]))
        p_min = float(options.get("--spec-draft-p-min", _DRAFT_SIMPLE_DEFAULTS[2]))
    except ValueError:
        return None
    return DraftSimpleFlags(options["-md"], n_max, n_min, p_min)


def policy_notes(drafter: str, policy: DraftPolicy, block: int | None) -> tuple[str, ...]:
    """One line where the plan's policy is more than llama-server runs: its adaptive cap, and the
    fixed `--spec-draft-n-max` rendered instead (`block`: the K the export chose; None: none)."""
    if not policy.adaptive:
        return ()
    rendered = "no draft-simple row" if block is None else f"a fixed --spec-draft-n-max {block}"
    return (f"the plan's {drafter} drafts with an adaptive cap {policy.k_min}..{policy.k_max}; llama-server has no "
            f"adaptive cap, so the export renders {rendered}"
            + ("" if policy.p_min is None else f" with its confidence stop --spec-draft-p-min {policy.p_min:g}"),)
