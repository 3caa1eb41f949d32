"""The task model: a Harbor task directory loaded into a `Task` (`loader`), its published layout
read from its Dockerfile, and its visible parts as the isolation policy sees them. Nothing here
grades or authors; `benchmark_adapter.grading` does, on top of it."""
