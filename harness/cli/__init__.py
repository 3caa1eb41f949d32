"""The `twin` command line: `app` registers one module per group of commands."""
