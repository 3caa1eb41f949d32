"""On top of the task model: running a task's unchanged grader, checking a task before a run
(oracle, empty candidate, seeded defects), and authoring one (`twin task new`)."""
