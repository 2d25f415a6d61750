"""Shared machinery: configuration, database, errors, auth, embeddings, the operation registry and
the MCP and REST adapters built from it."""
