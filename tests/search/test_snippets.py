"""Snippets: sentences, the query's terms, the matched sentence (lexical and dense), the rendered
snippet and its highlights, passage windows."""

from __future__ import annotations

import numpy as np
import pytest

from ragidx.search.snippets import (
    DENSE_SENTENCES,
    Region,
    Terms,
    match,
    render,
    sentences,
    snippet,
    window,
)

TEXT = (
    "Lighthouses are tall. The Pharos stood in Alexandria. Bees make honey in hives. "
    "Smeaton used granite blocks for the Eddystone tower. Rain fell all day."
)


def _texts(text: str) -> list[str]:
    return [text[lo:hi] for lo, hi in sentences(text)]


def test_sentences_cut_glued_sentences_but_not_abbreviations_or_wrapped_lines() -> None:
    text = (
        "The company grew.The tricky part came later, you see. The U.S.A. is big, e.g. the west.\n"
        "A line that wraps\nin the middle goes on.\n- first list item here\n- second list item here\n\n"
        "Related:\n\nUpdate: the law passed in 2024."
    )
    assert _texts(text) == [
        "The company grew.",
        "The tricky part came later, you see.",
        "The U.S.A. is big, e.g. the west.",
        "A line that wraps\nin the middle goes on.",
        "- first list item here",
        "- second list item here",
        "Related:",
        "Update: the law passed in 2024.",
    ]


def test_sentences_are_offsets_inside_the_span_asked_for() -> None:
    text = "Before the chunk. Inside one. Inside two is longer. After the chunk."
    start, end = text.index("Inside one"), text.index(" After")
    spans = sentences(text, start, end)
    assert [text[lo:hi] for lo, hi in spans] == ["Inside one.", "Inside two is longer."]
    assert all(start <= lo < hi <= end for lo, hi in spans)


def test_a_chunk_cut_mid_word_starts_at_its_first_whole_sentence() -> None:
    text = "It was the best startup. Our growth rate was fine, we thought."
    for cut in (text.index(". Our"), text.index("rtup.")):  # chunk boundaries inside "startup."
        assert [text[lo:hi] for lo, hi in sentences(text, cut)] == ["Our growth rate was fine, we thought."]
    assert _texts(text) == ["It was the best startup.", "Our growth rate was fine, we thought."]


def test_a_fragment_is_never_the_match_while_there_is_a_sentence() -> None:
    text = "# Granite\n\nThe tower stood on the rock for a century.\n\n[granite]"
    for by in ("lexical", "dense"):
        (found,) = match(
            [Region(text, 0, len(text))],
            Terms("granite"),
            [by],  # type: ignore[list-item]
            _bag_of_words(["# Granite"])[0],
            _bag_of_words,
        )
        assert (
            found is not None and text[slice(*found.sentence)] == "The tower stood on the rock for a century."
        )
    (alone,) = match([Region("[1] Fine.", 0, 9)], Terms("fine"), ["lexical"])
    assert alone is not None and alone.sentence == (0, 9)  # nothing longer: a fragment it is


def test_long_runs_without_punctuation_are_cut_at_a_space() -> None:
    text = " ".join(f"word{i}" for i in range(300))
    spans = sentences(text)
    assert len(spans) > 1 and all(hi - lo <= 400 for lo, hi in spans)
    assert " ".join(text[lo:hi] for lo, hi in spans) == text


def test_terms_are_the_analyzers_stems_without_question_words() -> None:
    terms = Terms("What happens to the companies that hired founders?")
    assert terms.wanted == {"happen", "compani", "hire", "founder"}  # "what", "that": question words
    text = "A company hires; the founder's companies happened."
    found = [text[lo:hi] for (lo, hi), _ in terms.spans(text)]
    assert found == ["company", "hires", "founder", "companies", "happened"]
    assert Terms("what is it?").spans(text) == []  # nothing to look for


def test_lexical_match_takes_the_sentence_with_most_distinct_terms() -> None:
    (found,) = match([Region(TEXT, 0, len(TEXT))], Terms("who used granite for Eddystone?"), ["lexical"])
    assert found is not None and found.by == "lexical" and found.score == 3.0  # used, granite, Eddystone
    assert TEXT[slice(*found.sentence)] == "Smeaton used granite blocks for the Eddystone tower."
    (none,) = match([Region(TEXT, 0, len(TEXT))], Terms("zebra"), ["lexical"])
    assert none is not None and TEXT[slice(*none.sentence)] == "Lighthouses are tall."  # ties: the first
    assert match([Region("   ", 0, 3)], Terms("x"), ["lexical"]) == [None]


def _bag_of_words(texts: list[str]) -> np.ndarray:
    """A stand-in encoder: one dimension per letter, so sentences sharing letters are close."""
    out = np.zeros((len(texts), 26), dtype=np.float32)
    for row, text in enumerate(texts):
        for char in text.lower():
            if "a" <= char <= "z":
                out[row, ord(char) - 97] += 1
    return out


def test_dense_match_settles_what_the_words_cannot() -> None:
    text = "Fizz buzz today is fine. Zzz zzz zzz quiz jazzily. Granite, granite and more granite."
    query = "quiz buzz castle"  # each sentence holds at most one of three terms: words cannot decide
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return _bag_of_words(texts)

    qv = _bag_of_words(["zzzzzz quiz jazz"])[0]
    lexical, dense = match([Region(text, 0, len(text))] * 2, Terms(query), ["lexical", "dense"], qv, embed)
    assert lexical is not None and dense is not None
    assert text[slice(*lexical.sentence)] == "Fizz buzz today is fine."  # a tie: the earliest
    assert text[slice(*dense.sentence)] == "Zzz zzz zzz quiz jazzily." and dense.by == "dense"
    assert 0.5 < dense.score <= 1.0
    assert len(calls) == 1 and len(calls[0]) == 3  # one call, every undecided sentence
    with pytest.raises(ValueError, match="query vector"):
        match([Region(text, 0, len(text))], Terms(query), ["dense"])


def test_words_decide_alone_when_one_sentence_holds_the_most_terms() -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return _bag_of_words(texts)

    qv = _bag_of_words(["rain"])[0]
    (found,) = match([Region(TEXT, 0, len(TEXT))], Terms("granite Eddystone"), ["dense"], qv, embed)
    assert found is not None and found.by == "lexical" and calls == []  # no model call at all
    assert TEXT[slice(*found.sentence)] == "Smeaton used granite blocks for the Eddystone tower."
    tied = "The granite tower is old. A granite tower by the zzz sea. Rain fell."
    (found,) = match(
        [Region(tied, 0, len(tied))], Terms("granite tower"), ["dense"], _bag_of_words(["zzz"])[0], embed
    )
    assert calls == [["The granite tower is old.", "A granite tower by the zzz sea."]]  # only the tie
    assert found is not None and found.by == "dense"
    assert tied[slice(*found.sentence)] == "A granite tower by the zzz sea."


def test_two_words_of_a_long_question_do_not_decide() -> None:
    text = "In fact the companies they started hire workers. Update: in 2024 zzz zzz zzz the law passed."
    query = "what changed in 2024 for people starting companies from abroad?"  # 6 terms
    assert len(Terms(query).wanted) == 6
    (words,) = match([Region(text, 0, len(text))], Terms(query), ["lexical"])
    (model,) = match(
        [Region(text, 0, len(text))],
        Terms(query),
        ["dense"],
        _bag_of_words(["zzz zzz 2024"])[0],
        _bag_of_words,
    )
    assert words is not None and text[slice(*words.sentence)].startswith("In fact")  # 2 terms of 6
    assert model is not None and model.by == "dense" and text[slice(*model.sentence)].startswith("Update")


def test_dense_match_embeds_at_most_the_cap_keeping_sentences_with_query_words() -> None:
    filler = " ".join(f"Filler sentence number {i} says nothing." for i in range(DENSE_SENTENCES + 20))
    text = f"{filler} The granite tower stood here."
    seen: list[str] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return _bag_of_words(texts)

    (found,) = match(
        [Region(text, 0, len(text))],
        Terms("granite castle"),  # one term of two: too weak to decide
        ["dense"],
        _bag_of_words(["The granite tower stood here."])[0],
        embed,
    )
    assert len(seen) == DENSE_SENTENCES and "The granite tower stood here." in seen
    assert found is not None and text[slice(*found.sentence)] == "The granite tower stood here."


def test_the_budget_is_spent_on_the_regions_in_order() -> None:
    text = " ".join(
        f"Sentence {word} number {i} here." for i, word in enumerate(["alpha"] * 5 + ["beta"] * 5)
    )
    half = text.index("Sentence beta")
    regions = [Region(text, 0, half - 1), Region(text, half, len(text)), Region(text, 0, half - 1)]
    seen: list[str] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return _bag_of_words(texts)

    found = match(regions, Terms("zebra"), ["dense"] * 3, _bag_of_words(["beta"])[0], embed, budget=7)
    assert len(seen) == 7 and [f.by for f in found if f] == ["dense", "dense", "lexical"]
    assert sum("beta" in text for text in seen) == 2  # the second region got what was left


def test_the_snippet_starts_with_the_matched_sentence_and_marks_it_and_the_terms() -> None:
    (found,) = match([Region(TEXT, 0, len(TEXT))], Terms("granite Eddystone"), ["lexical"])
    shown = render(TEXT, found, width=120)
    assert shown.sentence is not None
    assert shown.text[slice(*shown.sentence)] == "Smeaton used granite blocks for the Eddystone tower."
    assert [shown.text[lo:hi] for lo, hi in shown.terms] == ["granite", "Eddystone"]
    assert shown.words == ["granite", "Eddystone"] and len(shown.text) <= 120
    # what follows fills the width, then whole sentences before it; never the matched one cut
    assert shown.text.startswith("…") is False and "Rain fell all day." in shown.text
    assert snippet(TEXT, "who used granite for Eddystone?", width=60).startswith("Smeaton used granite")


def test_snippet_width_and_ellipses() -> None:
    assert len(snippet(TEXT * 10, "granite", width=80)) <= 80
    assert snippet("", "anything") == ""
    assert snippet("No overlap here.", "zebra") == "No overlap here."
    long_sentence = "Start " + "word " * 200 + "the granite tower stands here " + "more " * 50 + "end."
    (found,) = match([Region(long_sentence, 0, len(long_sentence))], Terms("granite"), ["lexical"])
    shown = render(long_sentence, found, width=80)
    assert shown.text.startswith("…") and shown.text.endswith("…") and len(shown.text) <= 80
    assert [shown.text[lo:hi] for lo, hi in shown.terms] == ["granite"]  # shown: the window moved to it
    one_token = "x" * 500 + "."
    assert len(snippet(one_token, "x", width=50)) == 50


def test_a_snippet_from_a_chunk_cut_mid_sentence_says_so() -> None:
    text = "The first sentence is long enough. And the second one goes on and on until"
    start = text.index("second")
    (found,) = match([Region(text, start, len(text) - 6)], Terms("second"), ["lexical"])
    shown = render(text, found, width=200)
    assert shown.text == "…second one goes on and on…"


def test_window_grows_by_whole_sentences_around_the_match() -> None:
    spans = sentences(TEXT)
    lo, hi = window(spans, 3, chars=90)
    assert TEXT[lo:hi] == "Bees make honey in hives. Smeaton used granite blocks for the Eddystone tower."
    assert window(spans, 0, chars=10) == spans[0]  # the matched sentence even when longer
    assert window(spans, 1, chars=10_000) == (spans[0][0], spans[-1][1])
