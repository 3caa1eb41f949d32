"""The roles of the loop (Diagnoser, Migrator, Verifier) and the agent loop they share."""
