"""One module per CLI command group; `polyplan.cli` assembles them."""
