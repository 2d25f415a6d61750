"""Cairn: a memory and analysis server for LLM agents."""

__version__ = "0.1.0"
