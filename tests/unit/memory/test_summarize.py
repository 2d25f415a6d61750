"""app/memory/summarize.py: sentence splitting (nupunkt within blocks), chunks joined over their
overlap, sentences at a missing chunk skipped, short citations, and extractive picks of whole sentences."""

from __future__ import annotations

import random

import pytest

from app.core.embeddings.local import LocalOnnxEmbedder
from app.memory.chunking import chunk_text
from app.memory.summarize import Passage, Span, assemble, extractive, join_chunks, short_ids, split_sentences


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


@pytest.mark.parametrize(
    "text",
    [
        "The wildcard cert for *.internal expires every 60 days.",
        "Logs match *.log and config.yaml files.",
        "We ship v2.3.1 to api.example.com today.",
        "It fixes e.g. the cache and i.e. the pool.",
        "The box has 3.5 GB of RAM and 2.5x the disk.",
        "Deploy to eu-west-1.prod.example.com at 10 a.m. tomorrow.",
        "Edit the .env file and README.md first.",
        "Mr. Jones vs. Ms. Lee, etc. are on call.",
    ],
)
def test_dots_inside_names_versions_hosts_globs_decimals_and_abbreviations_end_no_sentence(text: str) -> None:
    assert split_sentences([f"{text} The next one follows."]) == [text, "The next one follows."]


def test_a_line_break_ends_a_sentence_unless_the_line_goes_on_in_lower_case() -> None:
    text = "Sentence number 76 is about the region\nSentence number 77 wraps onto\nthe next line. Done."
    assert split_sentences([text]) == [
        "Sentence number 76 is about the region",
        "Sentence number 77 wraps onto the next line.",
        "Done.",
    ]
    assert split_sentences(["*.internal is the zone of the cluster"]) == ["*.internal is the zone of the cluster"]


def test_chunks_are_joined_over_their_overlap_once() -> None:
    assert join_chunks("One two. Three four five.", "Three four five. Six.") == "One two. Three four five. Six."
    assert join_chunks("it ends here", "here and there") == "it ends here and there"
    assert join_chunks("no overlap at all", "next piece") == "no overlap at all next piece"
    assert join_chunks("ends in where", "here we go") == "ends in where here we go"  # not inside a word


def _document(n: int) -> tuple[list[str], list[Passage]]:
    rnd = random.Random(3)
    words = ["eu-west", "zone", "cache", "v2.3.1", "*.internal", "api.example.com", "3.5 GB", "region"]
    sentences = [
        f"Sentence number {i} talks about " + " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 40))) + "."
        for i in range(n)
    ]
    chunks = chunk_text(" ".join(sentences), 60, 12)
    return sentences, [Passage(c.text, "doc", c.index, len(chunks) - 1) for c in chunks]


def test_a_document_read_whole_gives_its_sentences_once() -> None:
    sentences, passages = _document(40)
    assert len(passages) > 10
    assert split_sentences(passages[::-1]) == [" ".join(s.split()) for s in sentences]


def test_a_text_that_repeats_itself_keeps_its_repeats_when_the_overlap_is_known() -> None:
    lines = [f"Attempt {i} failed." if i % 10 == 0 else "Retrying the connection now." for i in range(60)]
    chunks = chunk_text(" ".join(lines), 40, 8)
    passages = [Passage(c.text, "log", c.index, len(chunks) - 1) for c in chunks]
    joined = assemble(passages, overlap_tokens=8)
    assert [s.text for s in joined] == [" ".join(lines)]
    # without the chunker's overlap the longest shared text is taken: repeats fold into fewer
    assert len(assemble(passages)[0].text) < len(" ".join(lines))
    assert join_chunks("one two", "two three", overlap_tokens=0) == "one two two three"


def test_a_missing_chunk_skips_the_sentences_it_cut() -> None:
    sentences, passages = _document(40)
    normal = [" ".join(s.split()) for s in sentences]
    kept = [p for p in passages if p.index not in (3, 4, 9)]
    spans = assemble(kept)
    assert [(s.cut_head, s.cut_tail) for s in spans] == [(False, True), (True, True), (True, False)]
    out = split_sentences(kept)
    assert out and all(s in normal for s in out), [s for s in out if s not in normal]
    assert assemble([Passage("a thought")]) == [Span("a thought")]


def test_short_ids_are_eight_characters_unless_two_would_clash() -> None:
    a, b = "3f2a9c1e-0000-4000-8000-000000000001", "3f2a9c1e-1111-4000-8000-000000000002"
    assert short_ids(["12345678-aaaa", "abcdef01-bbbb"]) == ["12345678", "abcdef01"]
    assert short_ids([a, b]) == ["3f2a9c1e-0", "3f2a9c1e-1"]
    assert short_ids([]) == []


async def test_an_extractive_summary_quotes_whole_sentences_within_the_budget() -> None:
    embedder = LocalOnnxEmbedder()
    long = (
        "The database migration failed on the statement timeout of the primary, so the team raised the "
        "timeout and retried the migration at night."
    )
    short = ["The migration failed.", "The timeout was raised.", "The migration was retried at night."]
    try:
        # the most central sentence is longer than the budget: it is passed over, not cut
        out = await extractive(embedder, [long, *short, "Bees make honey."], max_words=14)
        assert out == " ".join(short)
        # only when no sentence fits is the most central one shortened, and marked so
        assert await extractive(embedder, [long], max_words=5) == "The database migration failed on …"
    finally:
        await embedder.close()
