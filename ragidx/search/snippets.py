"""Snippets: the sentence of a hit that matched the query, and the few lines shown around it.

A hit's *region* is the text that matched: its best chunk, or the whole document.
:func:`sentences` cuts a region into sentences (character offsets into the document; sentences glued
without a space, ``end.Next``, are cut too; runs longer than ``MAX_SENTENCE_CHARS`` are cut at a
space). Fragments shorter than ``MIN_SENTENCE_CHARS`` (a heading, ``[1]``, ``Related:``) are shown
but never chosen as the match while the region has a longer sentence. :class:`Terms` finds the
query's words in a text as the BM25 analyzer sees them (lowercased, stop words dropped, stemmed),
with their character spans.

:func:`match` picks the sentence most similar to the query. The query's words decide when they
can: the sentence holding the most distinct query terms is the match when that is all of the
query's terms, or at least two and half of them, and no other sentence holds as many. Otherwise
(a tie, or no sentence holding that many: a paraphrase, text that shares few words), one of:

* ``dense`` — the highest cosine between the query vector and the undecided sentences, each
  embedded alone by the index's own encoder (document prompt); at most ``DENSE_SENTENCES`` of them
  per hit (those sharing the most query words, then the earliest);
* ``lexical`` — the most distinct query terms, then the most occurrences, then the earliest
  sentence. No model is needed.

So the encoder runs only where words cannot decide, which keeps the cost of a query low
(``benchmarks/passages.py``).

By default (``SearchOptions.sentences`` None) a single query that the index's encoder embedded
(``Index.search``, ``ragidx query TEXT``, the LangChain retriever) gets dense sentences within a
budget of ``DENSE_BUDGET`` sentences embedded, about one chunk's worth of tokens, spent on its
results in rank order (later results fall back to lexical); batches, caller-made vectors and lexical
mode (no model loaded) get lexical ones; ``sentences="dense"`` has no budget. Every result says
which (``match.by``).

:func:`render` builds the snippet shown to a person: the matched sentence first, followed (then
preceded by whole sentences) up to ``width`` characters, whitespace collapsed, ``…`` where text was
cut; it says where the sentence and the query's terms are in the snippet, for highlighting.
:func:`window` is the passage of a long hit without a chunk: whole sentences around the match.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

import numpy as np

from ragidx.embed.pooling import l2_normalize
from ragidx.index.config import LexicalConfig
from ragidx.index.lexical import Analyzer

SNIPPET_CHARS = 240
MIN_SENTENCE_CHARS = 12  # shorter fragments ("# Notes", "[1]", "Related:") are never the match
MAX_SENTENCE_CHARS = 400  # longer runs (no punctuation: lists, code, tables) are cut at a space
DENSE_SENTENCES = 48  # most sentences of one hit embedded to find the one that matched
DENSE_BUDGET = 32  # by default, the most sentences embedded for one query (its results in rank order)
PASSAGE_CHARS = 2000  # a hit without a chunk, longer than 1.5× this, is passed on as this much text

Span = tuple[int, int]
By = Literal["dense", "lexical"]
Embed = Callable[[list[str]], np.ndarray]  # texts → vectors (the index's encoder, document role)

# a boundary: end punctuation (and closing quotes) then whitespace; a lowercase word's end
# punctuation glued to a capital ("grew.The"); a blank line; a line break after end punctuation or
# before a list item or heading. A plain line break (a wrapped line) is not a boundary.
_BOUNDARY = re.compile(
    r"(?<=[.!?…])[\"'”’)\]]*\s+(?![a-z])"
    r"|(?<=[a-z][.!?])(?=[A-Z])"
    r"|\n[ \t]*\n\s*"
    r"|(?<=[.!?:;])[\"'”’)\]]*[ \t]*\n\s*"
    r"|[ \t]*\n\s*(?=[-*•#>|]|\d+[.)]\s)"
)
_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"\S+")
_ENDS = frozenset(".!?…:;\"'”’)]")  # a span ending in one of these ends a sentence
# English words a question is made of, not what it asks about: BM25 keeps most of them (its stop
# list is Lucene's 33 words), so they would mark "what" and "about" in every snippet.
QUESTION_WORDS = frozenset(
    """a about after again all also am an and any are as at be been before being both but by can
    could did do does doing for from had has have having he her here hers him his how i if in into is
    it its just me more most my no nor not of off on once only or other our out over own same she
    should so some such than that the their them then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you
    your""".split()  # noqa: SIM905 (a word list reads better as text)
)


def sentences(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    """The sentences of ``text[start:end]``, as (start, end) offsets into ``text``, stripped."""
    end = len(text) if end is None else end
    raw: list[Span] = []
    at = start
    for boundary in _BOUNDARY.finditer(text, start, end):
        raw.append((at, boundary.start()))
        at = boundary.end()
    raw.append((at, end))
    spans: list[Span] = []
    for lo, hi in raw:
        while lo < hi and text[lo].isspace():
            lo += 1
        while hi > lo and text[hi - 1].isspace():
            hi -= 1
        spans.extend(_cut_long(text, lo, hi))
    if spans and mid_sentence(text, start):  # a chunk cut mid-sentence: no stray ". " or "rtup." first
        lo, hi = spans[0]
        while lo < hi and not text[lo].isalnum():
            lo += 1
        spans[0] = (lo, hi) if hi - lo >= MIN_SENTENCE_CHARS or len(spans) == 1 else (hi, hi)
    return [(lo, hi) for lo, hi in spans if hi > lo]


def mid_sentence(text: str, at: int) -> bool:
    """Whether ``text[at:]`` starts inside a sentence (the text before it does not end one)."""
    before = text[max(0, at - 200) : at].rstrip()
    return bool(before) and before[-1] not in _ENDS and text[at - 1 : at] != "\n"


def _cut_long(text: str, lo: int, hi: int) -> list[Span]:
    out: list[Span] = []
    while hi - lo > MAX_SENTENCE_CHARS:
        cut = text.rfind(" ", lo + MAX_SENTENCE_CHARS // 2, lo + MAX_SENTENCE_CHARS)
        cut = cut if cut > lo else lo + MAX_SENTENCE_CHARS
        out.append((lo, cut))
        lo = cut + 1 if text[cut : cut + 1] == " " else cut
    if hi > lo:
        out.append((lo, hi))
    return out


class Terms:
    """The query's terms, found in other texts as the BM25 analyzer finds them."""

    def __init__(self, query: str, analyzer: Analyzer | None = None):
        self.analyzer = analyzer or default_analyzer()
        english = self.analyzer.config.stopwords == "english"
        words = [w for w in _WORD.findall(query) if not (english and w.lower() in QUESTION_WORDS)]
        self.wanted = frozenset(self.analyzer.terms(" ".join(words)))
        self._seen: dict[str, frozenset[str]] = {}  # a word → the query terms it holds

    def spans(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[Span, frozenset[str]]]:
        """Each word of ``text[start:end]`` holding a query term: its span and the terms."""
        if not self.wanted:
            return []
        found = []
        for word in _WORD.finditer(text, start, len(text) if end is None else end):
            key = word.group()
            if key not in self._seen:
                self._seen[key] = self.wanted.intersection(self.analyzer.terms(key))
            if self._seen[key]:
                found.append(((word.start(), word.end()), self._seen[key]))
        return found


@functools.cache
def default_analyzer() -> Analyzer:
    """The BM25 analyzer with default settings (for an index without a lexical index)."""
    return Analyzer(LexicalConfig())


@dataclass(frozen=True)
class Match:
    """The sentence of a region most similar to the query, the region's sentences, and where the
    query's terms are in the region (all document offsets)."""

    sentence: Span
    score: float  # dense: the cosine; lexical: distinct query terms in the sentence
    by: By
    sentences: list[Span]
    index: int  # the matched sentence's position in ``sentences``
    terms: list[tuple[Span, frozenset[str]]] = field(default_factory=list)


@dataclass(frozen=True)
class Region:
    """One hit's text to search for the matching sentence: ``text[start:end]``."""

    text: str
    start: int
    end: int


def match(
    regions: Sequence[Region],
    terms: Terms,
    by: Sequence[By],
    query_vector: np.ndarray | None = None,
    embed: Embed | None = None,
    budget: int | None = None,
) -> list[Match | None]:
    """The best sentence of each region (None: a region without text), ``by[i]`` choosing how; the
    sentences of every dense region are embedded in one call of ``embed``. ``budget``: at most this
    many sentences embedded in all, spent on the regions in order (a region gets what is left, its
    sentences sharing the most query words first; with fewer than two left, the words decide)."""
    found: list[tuple[list[Span], list[tuple[Span, frozenset[str]]], list[tuple[int, int]]]] = []
    for region in regions:
        spans = sentences(region.text, region.start, region.end)
        marks = terms.spans(region.text, region.start, region.end)
        found.append((spans, marks, _lexical(spans, marks)))
    dense: list[tuple[int, list[int]]] = []  # region → its sentences to embed
    texts: list[str] = []
    for i, (region, (spans, _, lexical)) in enumerate(zip(regions, found, strict=True)):
        open_ = _undecided(lexical, _eligible(spans), len(terms.wanted)) if spans else []
        left = DENSE_SENTENCES if budget is None else min(DENSE_SENTENCES, budget - len(texts))
        if by[i] == "dense" and len(open_) > 1 and left > 1:
            chosen = _candidates(lexical, open_, left)
            dense.append((i, chosen))
            texts += [" ".join(region.text[lo:hi].split()) for lo, hi in (spans[c] for c in chosen)]
    cosines: dict[int, dict[int, float]] = {}
    if texts:
        if query_vector is None or embed is None:
            raise ValueError("dense sentence matching needs the query vector and an embed function")
        query = l2_normalize(np.asarray(query_vector, dtype=np.float32).reshape(1, -1))[0]
        scores = l2_normalize(np.asarray(embed(texts), dtype=np.float32)) @ query
        at = 0
        for i, chosen in dense:
            cosines[i] = {c: float(s) for c, s in zip(chosen, scores[at : at + len(chosen)], strict=True)}
            at += len(chosen)
    out: list[Match | None] = []
    for i, (spans, marks, lexical) in enumerate(found):
        if not spans:
            out.append(None)
            continue
        if i in cosines:
            best = max(cosines[i], key=lambda c: (cosines[i][c], lexical[c], -c))
            out.append(Match(spans[best], cosines[i][best], "dense", spans, best, marks))
        else:
            best = max(_eligible(spans), key=lambda c: (lexical[c], -c))
            out.append(Match(spans[best], float(lexical[best][0]), "lexical", spans, best, marks))
    return out


def _lexical(spans: list[Span], marks: list[tuple[Span, frozenset[str]]]) -> list[tuple[int, int]]:
    """Per sentence: (distinct query terms, occurrences)."""
    distinct: list[set[str]] = [set() for _ in spans]
    count = [0] * len(spans)
    ends = [hi for _, hi in spans]
    at = 0
    for (lo, _), found in marks:
        while at < len(spans) and ends[at] <= lo:
            at += 1
        if at < len(spans) and spans[at][0] <= lo:
            distinct[at] |= found
            count[at] += 1
    return [(len(d), c) for d, c in zip(distinct, count, strict=True)]


def _undecided(lexical: list[tuple[int, int]], eligible: list[int], n_terms: int) -> list[int]:
    """The sentences the query's words cannot tell apart: those holding the most distinct query
    terms when that is all of them, or at least two and half of them (a tie needs the encoder; one
    is the match), else every eligible sentence (fewer words are too weak to decide)."""
    most = max(lexical[c][0] for c in eligible)
    if n_terms == 0 or (most < n_terms and most < max(2, (n_terms + 1) // 2)):
        return eligible
    return [c for c in eligible if lexical[c][0] == most]


def _eligible(spans: list[Span]) -> list[int]:
    """The sentences that may be the match: all but fragments, unless there is nothing else."""
    long = [i for i, (lo, hi) in enumerate(spans) if hi - lo >= MIN_SENTENCE_CHARS]
    return long or list(range(len(spans)))


def _candidates(lexical: list[tuple[int, int]], eligible: list[int], most: int) -> list[int]:
    """The sentences worth embedding: all eligible, or the ``most`` sharing the most query words
    (then the earliest)."""
    if len(eligible) <= most:
        return eligible
    ranked = sorted(eligible, key=lambda c: (-lexical[c][0], -lexical[c][1], c))
    return sorted(ranked[:most])


@dataclass(frozen=True)
class Snippet:
    """A snippet and, in its characters, where the matched sentence and the query's terms are."""

    text: str
    sentence: Span | None  # None: no sentence matched (an empty region)
    terms: list[Span]
    words: list[str]  # the query's terms as the snippet writes them, once each, in order


def render(text: str, found: Match | None, width: int = SNIPPET_CHARS) -> Snippet:
    """The snippet of one hit: see the module docstring."""
    if found is None:
        return Snippet("", None, [], [])
    tokens = [(t.start(), t.end()) for lo, hi in found.sentences for t in _TOKEN.finditer(text, lo, hi)]
    token_starts = [s for s, _ in tokens]
    lengths = np.concatenate([[0], np.cumsum([e - s for s, e in tokens])])
    lo_doc, hi_doc = found.sentence
    a, b = bisect_left(token_starts, lo_doc), bisect_left(token_starts, hi_doc)
    budget = width - 2  # room for an ellipsis at either end

    def size(u: int, v: int) -> int:
        return int(lengths[v] - lengths[u]) + max(v - u - 1, 0)

    if size(a, b) > budget:  # a long sentence: from its start, or from just before its first term
        marked = [bisect_right(token_starts, s) - 1 for (s, _), _ in found.terms if lo_doc <= s < hi_doc]
        first = marked[0] if marked else a
        u = a if size(a, first + 1) <= budget * 0.6 else max(a, first - 4)
        v = u + 1
        while v < b and size(u, v + 1) <= budget:
            v += 1
    else:  # the sentence, then what follows it, then the whole sentences before it, while it fits
        u, v = a, b
        while v < len(tokens) and size(u, v + 1) <= budget:
            v += 1
        before = found.index - 1
        while before >= 0 and size(bisect_left(token_starts, found.sentences[before][0]), v) <= budget:
            u = bisect_left(token_starts, found.sentences[before][0])
            before -= 1
    first, last = found.sentences[0][0], found.sentences[-1][1]
    lead = tokens[u][0] not in {s for s, _ in found.sentences} or (
        tokens[u][0] == first and mid_sentence(text, first)
    )
    parts = [text[s:e] for s, e in tokens[u:v]]
    out = ("…" if lead else "") + " ".join(parts)
    end = tokens[v - 1][1]
    if end not in {e for _, e in found.sentences} or (end == last < len(text) and text[end - 1] not in _ENDS):
        out += "…"
    snip_starts = [int(lengths[i] - lengths[u]) + (i - u) + lead for i in range(u, v)]
    if len(out) > width:  # one token longer than the snippet (a URL, a long number)
        out = out[: width - 1] + "…"

    def position(doc: int) -> int:
        i = max(u, min(bisect_right(token_starts, doc, u, v) - 1, v - 1))
        offset = snip_starts[i - u] + min(max(doc - tokens[i][0], 0), tokens[i][1] - tokens[i][0])
        return min(offset, len(out))

    shown_lo, shown_hi = tokens[u][0], tokens[v - 1][1]
    sentence = (position(max(lo_doc, shown_lo)), position(min(hi_doc, shown_hi)))
    marks: list[Span] = []
    words: list[str] = []
    for (s, e), _ in found.terms:
        if shown_lo <= s and e <= shown_hi and position(e) <= len(out) - (out.endswith("…")):
            marks.append((position(s), position(e)))
            word = out[marks[-1][0] : marks[-1][1]]
            if word and word.lower() not in {w.lower() for w in words}:
                words.append(word)
    return Snippet(out, sentence, marks, words)


class MatchInfo(TypedDict):
    """A result's matched sentence (``SearchResult.match``, ``ragidx query --json``, LangChain metadata)."""

    text: str  # the sentence, exactly as in the document
    char_start: int  # where it is in the document's text
    char_end: int
    by: By  # how it was chosen (see the module docstring)
    score: float  # dense: the sentence's cosine with the query; lexical: distinct query terms in it
    terms: list[str]  # the query's terms in the snippet, as written there, once each
    snippet_sentence: list[int] | None  # [start, end] of the sentence in the snippet (clipped)
    snippet_terms: list[list[int]]  # [start, end] of every query term in the snippet


def describe(text: str, found: Match | None, shown: Snippet) -> MatchInfo | None:
    """What a result says about its matched sentence and its snippet's highlights."""
    if found is None:
        return None
    lo, hi = found.sentence
    return MatchInfo(
        text=text[lo:hi],
        char_start=lo,
        char_end=hi,
        by=found.by,
        score=found.score,
        terms=shown.words,
        snippet_sentence=None if shown.sentence is None else list(shown.sentence),
        snippet_terms=[list(span) for span in shown.terms],
    )


def window(spans: Sequence[Span], lo: int, chars: int = PASSAGE_CHARS, hi: int | None = None) -> Span:
    """Whole sentences around ``spans[lo]`` (to ``spans[hi]``), one before then one after while the
    whole stays within ``chars`` characters: (start, end) in the document."""
    hi = lo if hi is None else hi
    grew = True
    while grew:
        grew = False
        if lo > 0 and spans[hi][1] - spans[lo - 1][0] <= chars:
            lo, grew = lo - 1, True
        if hi < len(spans) - 1 and spans[hi + 1][1] - spans[lo][0] <= chars:
            hi, grew = hi + 1, True
    return spans[lo][0], spans[hi][1]


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """The snippet of ``text`` for ``query``, its sentence chosen lexically (no model)."""
    (found,) = match([Region(text, 0, len(text))], Terms(query), ["lexical"])
    return render(text, found, width).text
