"""The sentence splitter of sentence-placed landmarks: mediacloud/sentence-splitter's English rules,
case by case (what the LMK authors' SentenceSplitter(language="en") returns for each text)."""

from __future__ import annotations

import pytest

from ragidx.embed.sentences import sentence_ends


def _sentences(text: str) -> list[str]:
    ends = sentence_ends(text)
    return [text[start:end].strip() for start, end in zip([0, *ends[:-1]], ends, strict=True)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'This is a paragraph. It contains several sentences. "But why," you ask?',
            ["This is a paragraph.", "It contains several sentences.", '"But why," you ask?'],
        ),
        ("Hey! Now.", ["Hey!", "Now."]),
        ("Hey... Now.", ["Hey...", "Now."]),
        ("Hey.  Now.", ["Hey.", "Now."]),
        ("Is it? yes it is.", ["Is it? yes it is."]),  # a lower-case word starts no sentence
        # abbreviations, single capitals and upper-case acronyms end none
        (
            "Mr. Smith met Dr. Who in the U.S. Army. Then J. R. left.",
            ["Mr. Smith met Dr. Who in the U.S. Army.", "Then J. R. left."],
        ),
        ("See e.g. the list, etc. Fine.", ["See e.g. the list, etc. Fine."]),
        # No. / Art. / pp. before a number only; another word ending in a period before a number ends one
        (
            "Hello. No. 1. No. 2. Prefix. 1. Prefix. 2. Good bye.",
            ["Hello.", "No. 1.", "No. 2.", "Prefix.", "1.", "Prefix.", "2.", "Good bye."],
        ),
        # closing quotes and brackets stay with their sentence, opening ones go with the next
        (
            "He said “Stop.” Then he went. (It rained.) The end.",
            ["He said “Stop.”", "Then he went.", "(It rained.)", "The end."],
        ),
        ('It broke . " So we left .', ['It broke . "', "So we left ."]),  # spaced-out transcripts
        ("Done. 中文。", ["Done.", "中文。"]),  # a caseless letter starts one
        # every line break ends one; blank lines add none
        ("Line one\nLine two.\n\n  Para two. Last", ["Line one", "Line two.", "Para two.", "Last"]),
    ],
)
def test_sentences_end_where_the_authors_splitter_ends_them(text: str, expected: list[str]) -> None:
    assert _sentences(text) == expected


def test_ends_are_character_offsets_after_each_sentence() -> None:
    text = "One. Two!\nThree?  "
    assert sentence_ends(text) == [4, 9, 16]
    assert sentence_ends("") == [] and sentence_ends(" \n ") == []
