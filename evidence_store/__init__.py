"""The SQLite evidence store: what each check established, violated or left not established.

`store.EvidenceStore` keeps one run's records (append-only, typed in `records`)
and serves the views (`views`: latest outcome per property, transitions between
rounds, summaries, a compact rendering within a character budget); `exchange`
writes and reads JSON Lines. `schema` holds the versioned SQLite schema and its
migrations. The store runs nothing: re-executing a record is `probes.rerun`.
"""
