"""One run, what every scaffold shares: its configuration and directory, its session, the workspace and
candidate repository, the trajectory, progress, the migration's course and the closing steps."""
