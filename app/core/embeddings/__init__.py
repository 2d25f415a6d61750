"""The embedding subsystem: providers, the queue that makes vectors after a write commits, what a
family embeds and how vectors travel to PostgreSQL, the k-NN and BM25 statements, relevance, the
tokenizer, and the process's load and CPUs that background work gives way to.

Import the modules themselves (`app.core.embeddings.queue`, ...); this package re-exports nothing, so
importing one never loads the others. The map is in docs/architecture.md ("Embeddings").
"""
