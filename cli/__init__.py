"""polyplan.cli: the `polyplan` command line, thin typer commands over the library API.

`app` assembles the command groups of `commands/`; `support` holds what every command shares
(one-line errors and exit codes). Only this package imports typer.
"""
