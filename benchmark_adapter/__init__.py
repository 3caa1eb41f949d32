"""Tasks in Harbor format: the task model (`task`, a low floor) and grading/authoring on top of it (`grading`)."""
