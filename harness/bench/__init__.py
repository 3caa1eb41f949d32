"""Benches: the bench's schema and directory, its trials and executors, post-run checks and the report."""
