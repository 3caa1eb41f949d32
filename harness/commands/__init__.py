"""One module per group of CLI commands; `harness.cli` registers them."""
