"""twin's harness: the CLI, the loop, the model client, the sandbox and boundary, runs and benches."""

__version__ = "0.1.0"
