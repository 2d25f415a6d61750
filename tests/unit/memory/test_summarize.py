"""app/memory/summarize.py: sentence splitting for extractive summaries (pysbd within blocks)."""

from __future__ import annotations

from app.memory.summarize import split_sentences


def test_sentences_blocks_and_list_items() -> None:
    text = "Dr. Smith paid $3.50 for coffee. He left at 5 p.m. sharp!\n\n- first item\n- second item\nWhy?"
    assert split_sentences([text]) == [
        "Dr. Smith paid $3.50 for coffee.",
        "He left at 5 p.m. sharp!",
        "first item",
        "second item",
        "Why?",
    ]


def test_repeats_and_fragments_are_dropped() -> None:
    assert split_sentences(["Same thing. Same thing. ok", "same thing."]) == ["Same thing."]
