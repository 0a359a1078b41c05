"""Prompt sets: the built-in held-out Python snippets, and user files (text or JSONL).

The built-in set is taken deterministically from the standard-library files the embedded family
holds out of its training (`polyplan.models.corpus.split_stdlib`), in four `KINDS`: a function's
lead and signature (the model writes the body), a signature and an opening docstring quote, a
whole function then its signature under a new name (the model mostly copies: the case prompt
lookup shines on), and a long stretch of a file. Candidates are ranked by a hash of (kind, file,
line), so the selection is stable while the held-out files do not change, and no file gives two
prompts of one kind.

User files (docs/profiling.md, "Prompts"): ``*.jsonl``, one JSON value per line, a string or an
object with ``"turns"`` (Spec-Bench's ``question.jsonl``: the first turn, since later ones answer
the model's first reply), ``"prompt"`` or ``"text"``, its ``"category"`` becoming ``Prompt.kind``
(else ``spec_bench`` for objects with turns, ``user`` otherwise); any other file is plain text,
prompts separated by blank lines.
"""

from __future__ import annotations

import ast
import hashlib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import parse_json_text

KINDS = ("function_body", "docstring", "repetitive_edit", "long_context")
_DEFAULT_PER_KIND = 4
_LEAD_CHARS = 500  # text kept before a function, so the model sees the surrounding code
_LONG_CHARS = 1400  # length of a long-context prompt
_MIN_BODY_LINES = 6
_MAX_EDIT_LINES = 30


@dataclass(frozen=True)
class Prompt:
    """One prompt: its text, its kind, and where it came from (used in error messages)."""

    text: str
    kind: str
    source: str


@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt and its token ids under the chain's tokenizer."""

    prompt: Prompt
    ids: tuple[int, ...]


def builtin_prompts(per_kind: int = _DEFAULT_PER_KIND, *, root: Path | None = None, files: Sequence[str] | None = None) -> tuple[Prompt, ...]:
    """The built-in prompt set: `per_kind` (>= 1) prompts of each kind in `KINDS`, kinds
    interleaved, drawn from the `files` under the stdlib folder `root` (default: the family's
    held-out validation files)."""
    if per_kind < 1:
        raise PolyplanError(f"per_kind: must be >= 1, got {per_kind}")
    if root is None or files is None:
        from polyplan.models.corpus import split_stdlib

        split = split_stdlib(root)
        root, files = split.root, split.validation
    candidates: dict[str, list[tuple[str, Prompt]]] = {kind: [] for kind in KINDS}
    for relative in files:
        try:
            text = (root / relative).read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue  # a file this interpreter cannot parse simply offers no prompts
        for kind, prompt in _file_candidates(relative, text, tree):
            rank = hashlib.sha256(f"{kind}:{prompt.source}".encode()).hexdigest()
            candidates[kind].append((rank, prompt))
    chosen: dict[str, list[Prompt]] = {}
    for kind in KINDS:
        used_files: set[str] = set()
        picks: list[Prompt] = []
        for _, prompt in sorted(candidates[kind], key=lambda item: item[0]):
            file = prompt.source.rsplit(":", 1)[0]
            if file in used_files:
                continue
            used_files.add(file)
            picks.append(prompt)
            if len(picks) == per_kind:
                break
        if not picks:
            raise PolyplanError(f"builtin prompts: no {kind} snippet found in the held-out stdlib files under {root}")
        chosen[kind] = picks
    interleaved = []
    for index in range(per_kind):
        interleaved.extend(chosen[kind][index] for kind in KINDS if index < len(chosen[kind]))
    return tuple(interleaved)


def _file_candidates(relative: str, text: str, tree: ast.Module):
    lines = text.splitlines(keepends=True)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _function_candidates(relative, lines, node)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = _first_line(node)
            head = "".join(lines[start:])
            if len(head) >= _LONG_CHARS + 400:
                yield "long_context", Prompt(_cut_at_line(head, _LONG_CHARS), "long_context", f"stdlib:{relative}:{start + 1}")


def _function_candidates(relative: str, lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef):
    start = _first_line(node)  # 0-based, decorators included
    end = node.end_lineno  # 1-based inclusive == 0-based exclusive
    body_start = node.body[0].lineno - 1
    docstring = _docstring_node(node)
    source = f"stdlib:{relative}:{start + 1}"
    lead = _lead(lines, start)
    header = "".join(lines[start:body_start])
    body_lines = end - body_start
    if body_lines >= _MIN_BODY_LINES:
        upto = docstring.end_lineno if docstring is not None else body_start
        if docstring is None or end - upto >= _MIN_BODY_LINES:
            yield "function_body", Prompt(lead + "".join(lines[start:upto]), "function_body", source)
    if docstring is not None and len(ast.get_docstring(node) or "") >= 40:
        first = lines[docstring.lineno - 1]
        opening = first.find('"""')
        if opening >= 0 and first[:opening].strip() == "" and docstring.lineno - 1 == body_start:
            yield "docstring", Prompt(lead + header + first[: opening + 3], "docstring", source)
    if _MIN_BODY_LINES <= end - start <= _MAX_EDIT_LINES and not node.decorator_list:
        function = textwrap.dedent("".join(lines[start:end]))
        renamed = textwrap.dedent(header).replace(f"def {node.name}(", f"def {node.name}_v2(", 1)
        if renamed != textwrap.dedent(header):
            yield "repetitive_edit", Prompt(function + "\n\n" + renamed, "repetitive_edit", source)


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators]) - 1


def _docstring_node(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Expr | None:
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def _lead(lines: list[str], start: int) -> str:
    """Whole lines before `start`, at most `_LEAD_CHARS` characters of them."""
    kept: list[str] = []
    total = 0
    for line in reversed(lines[:start]):
        if total + len(line) > _LEAD_CHARS:
            break
        kept.append(line)
        total += len(line)
    return "".join(reversed(kept))


def _cut_at_line(text: str, chars: int) -> str:
    """The shortest prefix of whole lines with at least `chars` characters."""
    cut = text.find("\n", chars)
    return text if cut < 0 else text[: cut + 1]


# --------------------------------------------------------------------------- user files


def read_prompt_file(path: str | Path) -> tuple[Prompt, ...]:
    """Read a prompt file (format in the module docstring); `PolyplanError` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolyplanError(f"{path}: no such prompt file") from None
    except IsADirectoryError:
        raise PolyplanError(f"{path}: is a folder, not a prompt file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PolyplanError(f"{path}: cannot read the prompt file ({getattr(error, 'strerror', None) or error})") from None
    if not text.strip():
        raise PolyplanError(f"{path}: no prompts (the file is empty)")
    prompts = _read_jsonl(path, text) if path.suffix.lower() == ".jsonl" else _read_text(path, text)
    if not prompts:
        raise PolyplanError(f"{path}: no prompts (every entry is blank)")
    return prompts


def _read_text(path: Path, text: str) -> tuple[Prompt, ...]:
    prompts, block, block_start = [], [], 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            if not block:
                block_start = number
            block.append(line)
        elif block:
            prompts.append(Prompt("\n".join(block), "user", f"{path}:{block_start}"))
            block = []
    if block:
        prompts.append(Prompt("\n".join(block), "user", f"{path}:{block_start}"))
    return tuple(prompts)


def _read_jsonl(path: Path, text: str) -> tuple[Prompt, ...]:
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        value = parse_json_text(line, where)
        prompt = _prompt_of(value, where)
        if prompt.strip():
            kind = "spec_bench" if isinstance(value, dict) and "turns" in value else "user"
            if isinstance(value, dict) and isinstance(value.get("category"), str) and value["category"].strip():
                kind = value["category"].strip()  # Spec-Bench's category: reports break results down by it
            prompts.append(Prompt(prompt, kind, where))
    return tuple(prompts)


def _prompt_of(value: object, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "turns" in value:
            turns = value["turns"]
            if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
                raise PolyplanError(f"{where}: 'turns' must be a non-empty list of strings")
            return turns[0]
        for key in ("prompt", "text"):
            if key in value:
                if not isinstance(value[key], str):
                    raise PolyplanError(f"{where}: {key!r} must be a string")
                return value[key]
    raise PolyplanError(f"{where}: expected a JSON string or an object with 'turns', 'prompt' or 'text'")


# --------------------------------------------------------------------------- encoding


def encode_prompts(prompts: Sequence[Prompt], tokenizer, *, raw: bool = False) -> tuple[EncodedPrompt, ...]:
    """Token ids of each prompt under a Hugging Face tokenizer, as `polyplan generate` encodes:
    through the tokenizer's chat template (one user turn, generation prompt added) when it has
    one, unless `raw` (`decoder.chat.encode_prompt`)."""
    from polyplan.decoder.chat import encode_prompt

    encoded = []
    for prompt in prompts:
        ids = tuple(encode_prompt(tokenizer, prompt.text, raw=raw, where=prompt.source))
        if not ids:
            raise PolyplanError(f"{prompt.source}: the prompt encodes to no tokens")
        encoded.append(EncodedPrompt(prompt, ids))
    return tuple(encoded)


def check_fits(prompts: Sequence[EncodedPrompt], name: str, max_context: int | None, extra: int) -> None:
    """`PolyplanError` naming the first prompt that, with `extra` more tokens, overflows `name`'s context."""
    if max_context is None:
        return
    for prompt in prompts:
        if len(prompt.ids) > max_context:
            raise PolyplanError(
                f"{prompt.prompt.source}: prompt of {len(prompt.ids)} tokens is longer than the context of "
                f"{name!r} ({max_context} tokens)"
            )
        if len(prompt.ids) + extra > max_context:
            raise PolyplanError(
                f"{prompt.prompt.source}: prompt of {len(prompt.ids)} tokens + {extra} generated/drafted tokens "
                f"does not fit the context of {name!r} ({max_context} tokens); shorten it or lower --new-tokens"
            )


def token_stream(prompts: Sequence[Sequence[int]], length: int) -> tuple[int, ...]:
    """`length` real tokens: the prompts' ids one after another, repeated if they are too few."""
    flat = [token for prompt in prompts for token in prompt]
    repeats = -(-length // len(flat))
    return tuple((flat * repeats)[:length])
