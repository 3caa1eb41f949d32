"""Similarity measures, the probe runner, differential probes, candidate-side checks, audit."""
