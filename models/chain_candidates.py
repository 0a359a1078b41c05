"""A chain resolved once, from a plan (`ChainCandidates.from_plan`) or from names
(`ChainCandidates.from_names`), to the models.yaml entries that make it. Nothing is loaded until
`ChainCandidates.load`, so every error a file or a name can cause comes before any model loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from polyplan.decoder.member import ChainMember
from polyplan.formats.candidates import DTYPES, MODEL_DERIVATIONS, RULE_DRAFTERS, Candidate, CandidateSet, base_chain, read_candidates
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import DraftPolicy, PlanFile, VerifyWidths, read_plan
from polyplan.formats.sampling import SamplingMode
from polyplan.models.candidate_file import plan_candidates
from polyplan.models.fingerprints import with_device
from polyplan.models.loader import LoadedCandidates, load_candidates

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ChainCandidates:
    """A chain as models.yaml entries to load, with how to run it. `candidates`: the chain's members
    (target first), the other chains' the command runs, then the entries derived members are built
    from, each loaded once. `chain`: the members' names, M_1 first ("#2" on a repeated entry).
    `labels`: how ad-hoc (folder) members are named in errors. `block_sizes` None: the decoder's
    default; `verify_widths` (): never pad; `plan` None: resolved from names."""

    candidates: CandidateSet
    chain: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    block_sizes: tuple[int, ...] | None = None
    verify_widths: tuple[VerifyWidths, ...] = ()
    temperature: float = 0.0
    plan: PlanFile | None = None
    draft_policy: DraftPolicy | None = None

    @classmethod
    def from_plan(
        cls,
        plan: PlanFile | PathLike,
        *,
        models_yaml: PathLike | None = None,
        device: str | None = None,
        also: Sequence[Sequence[str]] = (),
        label: str | None = None,
    ) -> ChainCandidates:
        """The plan's own chain and settings, its models from `models_yaml` (default: the plan's), on
        `device` (default: where profiled); `also`: other chains of the plan the command runs.
        PolyplanError: an unreadable plan, no models.yaml, a model missing or changed since."""
        planned = plan if isinstance(plan, PlanFile) else read_plan(plan)
        label = label if label is not None else ("plan.json" if isinstance(plan, PlanFile) else str(plan))
        names = tuple(dict.fromkeys(name for chain in (planned.chain, *also) for name in chain))
        candidates = plan_candidates(planned, label, models_yaml, names)
        resolved = _resolve(names, with_device(candidates, device), "cpu")
        return cls(resolved.candidates, tuple(planned.chain), resolved.labels, tuple(planned.block_sizes),
                   tuple(planned.best.verify_widths), SamplingMode.parse(planned.sampling).temperature, planned,
                   planned.best.draft_policy)

    @classmethod
    def from_names(
        cls,
        models_yaml: PathLike | CandidateSet | None,
        names: Sequence[str],
        *,
        device: str | None = None,
        block_sizes: Sequence[int] | None = None,
        temperature: float = 0.0,
    ) -> ChainCandidates:
        """The chain `names` (target first): candidates of `models_yaml` (None: folders only), else
        model folders or .gguf files as ad-hoc `source:` candidates in their saved dtype. PolyplanError
        before any load: an unreadable models.yaml, an empty chain, an entry that is neither a
        candidate nor a model, or an n-gram drafter as the target."""
        candidates = read_candidates(models_yaml) if isinstance(models_yaml, (str, os.PathLike)) else models_yaml
        if candidates is not None and device is not None:
            candidates = with_device(candidates, device)
        resolved = _resolve(tuple(names), candidates, device or "cpu")
        blocks = None if block_sizes is None else tuple(block_sizes)
        return dataclasses.replace(resolved, block_sizes=blocks, temperature=temperature)

    def load(self) -> LoadedChain:
        """Load every needed entry once (`models.loader.load_candidates`)."""
        return LoadedChain(self, load_candidates(self.candidates, labels=self.labels))


@dataclass(frozen=True)
class LoadedChain:
    """A resolved chain, loaded."""

    resolved: ChainCandidates
    loaded: LoadedCandidates

    @property
    def members(self) -> tuple[ChainMember, ...]:
        return tuple(self.loaded.chain(self.resolved.chain))

    @property
    def tokenizer(self) -> object:
        return self.loaded.tokenizer

    @property
    def vocab(self) -> int:
        """The chain's vocabulary size (the target's valid tokens)."""
        return self.members[0].valid_vocab_size

    @property
    def by_name(self) -> dict[str, ChainMember]:
        return {item.candidate.name: item.member for item in self.loaded.candidates}


def _resolve(entries: Sequence[str], candidates: CandidateSet | None, device: str) -> ChainCandidates:
    """`entries` (target first) as candidates to load (see `ChainCandidates.from_names`)."""
    if not entries:
        raise PolyplanError("chain: empty; give at least the target model folder")
    known = {c.name: c for c in candidates.candidates} if candidates is not None else {}
    named = [known[entry] for entry in entries if entry in known]
    bases = [base for candidate in named for base in _bases(candidates, candidate)]
    needed = [c.name for c in named + bases]  # a folder's member gets another name than these
    members: list[Candidate] = []
    labels: dict[str, str] = {}
    for index, entry in enumerate(entries):
        taken = [m.name for m in members]
        if entry in known:
            member = known[entry]
            name = _unique(member.name, taken)
        else:
            member = _folder_candidate(entry, index, device, candidates)
            name = _unique(member.name, taken + needed)
            labels[name] = f"chain member {index} ({name!r})"
        members.append(dataclasses.replace(member, name=name, is_target=index == 0))
    if isinstance(members[0].derive, RULE_DRAFTERS):
        raise PolyplanError(f"chain member 0 ({members[0].name!r}): an n-gram drafter cannot be the target (it has no model)")
    chosen = {m.name for m in members}
    extra = [dataclasses.replace(base, is_target=False) for base in dict.fromkeys(bases) if base.name not in chosen]
    origin = candidates.origin if candidates is not None else "--chain"
    return ChainCandidates(CandidateSet(tuple(members) + tuple(extra), origin), tuple(m.name for m in members), labels)


def _folder_candidate(entry: str, index: int, device: str, candidates: CandidateSet | None) -> Candidate:
    path = Path(entry).expanduser()
    kind = "gguf" if path.suffix.lower() == ".gguf" else "local"
    exists = path.is_file() if kind == "gguf" else path.is_dir()
    if not exists:
        looks_like_a_path = kind == "gguf" or "/" in entry or "\\" in entry or entry.startswith((".", "~"))
        if looks_like_a_path or candidates is None:
            raise PolyplanError(f"chain member {index} ({entry!r}): no such model folder")
        names = ", ".join(c.name for c in candidates.candidates)
        raise PolyplanError(f"--chain: {entry!r} is neither a candidate of {candidates.origin} ({names}) nor a model folder")
    name = path.name or entry
    return Candidate(name, str(path), kind, None, False, _saved_dtype(path), device, True)


def _saved_dtype(folder: Path) -> str:
    """The dtype a folder's config.json saved its weights in (as `dtype="auto"` loads), if a
    candidate may name it, else float32."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "float32"  # a .gguf file, or a config the load itself reports
    saved = config.get("dtype", config.get("torch_dtype")) if isinstance(config, dict) else None
    return saved if saved in DTYPES else "float32"


def _bases(candidates: CandidateSet, candidate: Candidate) -> tuple[Candidate, ...]:
    """The entries a derived candidate is built from (none for a source entry or the n-gram drafter)."""
    derive = candidate.derive
    return base_chain(candidates, derive.base) if isinstance(derive, MODEL_DERIVATIONS) else ()


def _unique(name: str, taken: Sequence[str]) -> str:
    """`name`, or `name#2`, `name#3`, … when it is taken."""
    if name not in taken:
        return name
    return next(f"{name}#{k}" for k in range(2, len(taken) + 3) if f"{name}#{k}" not in taken)
