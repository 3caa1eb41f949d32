"""One run: its configuration and directory, its session, the loop, the workspace and candidate repository, the Verifier's desk, the trajectory and the closing steps."""
