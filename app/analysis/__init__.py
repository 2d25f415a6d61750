"""Analysis sessions: ingest upstream data, store findings, query, act, clear (seed 000)."""
