"""Datasets: analytics tools over CSV / Parquet / JSON files (seed 002)."""
