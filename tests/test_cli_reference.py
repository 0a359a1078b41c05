"""docs/cli.md is the typer app's own reference (`polyplan.cli.reference`): regenerate it with
`python -m polyplan.cli.reference > docs/cli.md` whenever a command or option changes."""

from __future__ import annotations

from pathlib import Path

import typer

from polyplan.cli.app import app
from polyplan.cli.reference import cli_reference

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_the_page_is_what_the_app_generates():
    assert PAGE.read_text(encoding="utf-8") == cli_reference(app), (
        "docs/cli.md is out of date: run `python -m polyplan.cli.reference > docs/cli.md`")


def test_every_command_and_option_of_the_app_is_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        subcommands = getattr(command, "commands", {"": command})
        for sub_name, sub in subcommands.items():
            heading = " ".join(part for part in ("polyplan", name, sub_name) if part)
            assert f"## `{heading}`" in page
            section = page.split(f"## `{heading}`", 1)[1].split("\n## ", 1)[0]
            for param in sub.params:
                if param.opts[0].startswith("-") and not param.hidden:
                    assert f"`{param.opts[0]}`" in section, (heading, param.opts[0])


def test_a_changed_option_makes_the_page_differ():
    # negative control: an app with one option more does not generate the same page
    extra = typer.Typer()

    @extra.command()
    def only(flag: bool = typer.Option(False, "--flag", help="A flag.")) -> None:
        """One command."""

    @extra.command()
    def other() -> None:
        """Another command."""

    page = cli_reference(extra)
    assert "`--flag` | off | A flag." in page
    assert page != cli_reference(app)
