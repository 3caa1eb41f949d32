"""Loading tasks (Harbor format), the visible/hidden split, and running the unchanged grader."""
