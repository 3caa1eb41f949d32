"""twin's roof: the CLI, the loop and its scaffolds, the model clients, run directories, benches and reports."""

__version__ = "0.1.0"
