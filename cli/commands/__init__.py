"""One module per CLI command group; `polyplan.cli.app` assembles them."""
