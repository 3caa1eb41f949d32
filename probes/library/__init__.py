"""Bundled probe files, one folder per task (read by `probes.suite.task_probes`)."""
