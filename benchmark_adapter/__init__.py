"""Tasks in Harbor format, graded: the unchanged grader, oracles, seeded defects, references and authoring
(`grading`), on top of the task model (`task_model`)."""
