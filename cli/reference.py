"""docs/cli.md, generated from the typer app, so that no option is described by hand twice.

Regenerate with `python -m polyplan.cli.reference > docs/cli.md`; `tests/test_cli_reference.py`
fails when the file and the app differ. The page is built from what every typer version keeps
(option names, help, defaults, flags), not from the terminal renderer, so it does not change
with typer's styling.
"""

from __future__ import annotations

import enum
import os
from typing import Any, Iterator

import typer

_HEADER = """# Command reference

Generated from the command-line app by `python -m polyplan.cli.reference > docs/cli.md`; do not
edit by hand (`tests/test_cli_reference.py` checks it). `polyplan COMMAND --help` prints the same.
"""


def cli_reference(app: typer.Typer) -> str:
    """The markdown reference of every command of `app`, in the order `--help` lists them."""
    root = typer.main.get_command(app)
    sections = [_HEADER]
    for path, command in _commands(root, ("polyplan",)):
        sections.append(_section(path, command))
    return "\n".join(sections)


def _commands(group: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, command) for `group` itself when it has options of its own, then every
    subcommand depth first, by name."""
    if any(not param.hidden for param in group.params if _is_option(param)):
        yield path, group
    for name in sorted(group.commands):
        command = group.commands[name]
        if command.hidden:
            continue
        if hasattr(command, "commands"):
            yield from _commands(command, path + (name,))
        else:
            yield path + (name,), command


def _section(path: tuple[str, ...], command: Any) -> str:
    arguments = [param for param in command.params if not _is_option(param)]
    usage = " ".join(path + ("[OPTIONS]",) + tuple(param.name.upper() for param in arguments))
    lines = [f"## `{' '.join(path)}`", "", f"`{usage}`", ""]
    if command.help:
        lines += [_clean(command.help), ""]
    if arguments:
        lines += ["| argument | description |", "| --- | --- |"]
        lines += [f"| `{param.name.upper()}` | {_cell(getattr(param, 'help', None) or '')} |" for param in arguments]
        lines.append("")
    options = [param for param in command.params if _is_option(param) and not param.hidden]
    if options:
        lines += ["| option | default | description |", "| --- | --- | --- |"]
        lines += [f"| {_names(param)} | {_default(param)} | {_cell(param.help or '')} |" for param in options]
        lines.append("")
    return "\n".join(lines)


def _is_option(param: Any) -> bool:
    return bool(getattr(param, "opts", None)) and param.opts[0].startswith("-")


def _names(param: Any) -> str:
    return ", ".join(f"`{name}`" for name in list(param.opts) + list(param.secondary_opts))


def _default(param: Any) -> str:
    if param.required:
        return "required"
    default = param.default
    if getattr(param, "is_flag", False) or isinstance(default, bool):
        return "on" if default else "off"
    if default is None or callable(default):
        return ""
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, os.PathLike):
        default = os.fspath(default)
    if isinstance(default, (list, tuple)):
        default = ", ".join(str(item) for item in default)
    return f"`{default}`"


def _clean(text: str) -> str:
    """Help text as markdown: typer's paragraph breaks kept, its \\b markers dropped."""
    return "\n".join(line.rstrip() for line in text.strip().splitlines() if line.strip() != "\b")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def main() -> None:
    from polyplan.cli.app import app

    print(cli_reference(app), end="")


if __name__ == "__main__":
    main()
