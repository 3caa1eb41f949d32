"""The SQLite evidence store: what each check established, violated or left unresolved."""
