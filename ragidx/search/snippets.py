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

What depends only on a region (its sentences, its words and the terms the analyzer makes of
them, its whitespace tokens) is analysed once per :class:`Shared` and reused by every query that
meets the region: a batch's queries (``Retriever.search_many``) share one, so a document found by
many of them is cut and analysed once, and each query's lexical match costs what its own terms
occur in the region, not the region's length. The results are the same as each query analysing
alone.

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
from itertools import accumulate
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
            held = self.held(word.group())
            if held:
                found.append(((word.start(), word.end()), held))
        return found

    def held(self, word: str, terms: Sequence[str] | None = None) -> frozenset[str]:
        """The query terms ``word`` holds (``terms``: the word's terms, when already analysed)."""
        if word not in self._seen:
            self._seen[word] = self.wanted.intersection(self.analyzer.terms(word) if terms is None else terms)
        return self._seen[word]


@functools.cache
def default_analyzer() -> Analyzer:
    """The BM25 analyzer with default settings (for an index without a lexical index)."""
    return Analyzer(LexicalConfig())


@dataclass(frozen=True)
class _Layout:
    """A region's whitespace tokens (:func:`render` joins them with single spaces): where each
    starts and ends, and ``widths[i]`` = the characters of the first ``i`` tokens plus ``i``, so
    tokens ``u`` to ``v`` take ``widths[v] − widths[u] − 1`` characters joined (``v > u``). Plain
    lists of numbers, kept while a batch runs: nothing for the garbage collector to walk."""

    starts: list[int]
    ends: list[int]
    widths: list[int]
    sentence_starts: frozenset[int]
    sentence_ends: frozenset[int]
    mid_sentence: bool  # the region starts inside a sentence (see :func:`mid_sentence`)

    @classmethod
    def of(cls, text: str, spans: Sequence[Span]) -> _Layout:
        tokens = [t.span() for lo, hi in spans for t in _TOKEN.finditer(text, lo, hi)]
        return cls(
            [lo for lo, _ in tokens],
            [hi for _, hi in tokens],
            [0, *accumulate(hi - lo + 1 for lo, hi in tokens)],
            frozenset(lo for lo, _ in spans),
            frozenset(hi for _, hi in spans),
            bool(spans) and mid_sentence(text, spans[0][0]),
        )


@dataclass(frozen=True)
class Match:
    """The sentence of a region most similar to the query, the region's sentences, and where the
    query's terms are in the region (all document offsets)."""

    sentence: Span
    score: float  # dense: the cosine; lexical: distinct query terms in the sentence
    by: By
    sentences: list[Span]
    index: int  # the matched sentence's position in ``sentences``
    terms: list[tuple[Span, frozenset[str]]] = field(default_factory=list)  # in text order
    layout: _Layout | None = field(default=None, compare=False, repr=False)  # the region's, for render


@dataclass(frozen=True)
class Region:
    """One hit's text to search for the matching sentence: ``text[start:end]``."""

    text: str
    start: int
    end: int


class _Analysed:
    """One region analysed for every query: its sentences, those that may be the match, its words,
    each distinct word's terms and each term's words (the forms the analyzer makes it of). Which
    sentence holds a word is found when a query marks it."""

    def __init__(self, region: Region, shared: Shared):
        self.text = region.text
        self.spans = sentences(region.text, region.start, region.end)
        self.eligible = _eligible(self.spans) if self.spans else []
        self.is_eligible = frozenset(self.eligible)
        found = list(_WORD.finditer(region.text, region.start, region.end))
        self._forms = [word.group() for word in found]  # each word as written, and where it starts
        self._starts = [word.start() for word in found]
        self._ends = [hi for _, hi in self.spans]
        self.terms: dict[str, tuple[str, ...]] = {}  # each form's terms
        self.postings: dict[str, list[str]] = {}  # a term → the forms holding it
        known, analyse = shared.words, shared.analyzer.terms
        for form in dict.fromkeys(self._forms):
            held = known.get(form)
            if held is None:
                held = known[form] = tuple(analyse(form))
            self.terms[form] = held
            for term in held:
                at_forms = self.postings.get(term)
                if at_forms is None:
                    self.postings[term] = [form]
                elif at_forms[-1] != form:  # a form holding a term twice (CJK bigrams) named once
                    at_forms.append(form)
        self._layout: _Layout | None = None

    @property
    def layout(self) -> _Layout:
        if self._layout is None:
            self._layout = _Layout.of(self.text, self.spans)
        return self._layout

    def _sentence(self, start: int) -> int:
        """The sentence holding a word starting at ``start`` (-1: between sentences)."""
        at = bisect_right(self._ends, start)  # the first sentence ending after the start
        return at if at < len(self.spans) and self.spans[at][0] <= start else -1

    def marks(self, terms: Terms) -> tuple[list[tuple[Span, frozenset[str]]], dict[int, int], dict[int, int]]:
        """The words holding a query term (as :meth:`Terms.spans` finds them), and per sentence
        holding any: its distinct query terms and its occurrences (sentences not named: none)."""
        distinct: dict[int, int] = {}
        count: dict[int, int] = {}
        forms = {form for term in terms.wanted for form in self.postings.get(term, ())}
        if not forms:
            return [], distinct, count
        marks = []
        holding: dict[int, set[str]] = {}  # a sentence → the query terms in it
        for i in [i for i, form in enumerate(self._forms) if form in forms]:
            form, start = self._forms[i], self._starts[i]
            held = terms.held(form, self.terms[form])
            marks.append(((start, start + len(form)), held))
            s = self._sentence(start)
            if s >= 0:
                count[s] = count.get(s, 0) + 1
                holding.setdefault(s, set()).update(held)
        distinct = {s: len(held) for s, held in holding.items()}
        return marks, distinct, count

    def lexical(self, distinct: dict[int, int], count: dict[int, int]) -> list[tuple[int, int]]:
        """Per sentence: (distinct query terms, occurrences)."""
        return [(distinct.get(s, 0), count.get(s, 0)) for s in range(len(self.spans))]


class Shared:
    """What the searches of one batch share: each region's analysis (:class:`_Analysed`, keyed by
    its text and bounds) and each word's terms. Holds what the batch found (linear in its regions'
    text); make one per batch."""

    def __init__(self, analyzer: Analyzer | None = None):
        self.analyzer = analyzer or default_analyzer()
        self.words: dict[str, tuple[str, ...]] = {}  # a word → its terms
        self._regions: dict[tuple[str, int, int], _Analysed] = {}

    def region(self, region: Region) -> _Analysed:
        key = (region.text, region.start, region.end)
        found = self._regions.get(key)
        if found is None:
            found = self._regions[key] = _Analysed(region, self)
        return found


def match(
    regions: Sequence[Region],
    terms: Terms,
    by: Sequence[By],
    query_vector: np.ndarray | None = None,
    embed: Embed | None = None,
    budget: int | None = None,
    shared: Shared | None = None,
) -> list[Match | None]:
    """The best sentence of each region (None: a region without text), ``by[i]`` choosing how; the
    sentences of every dense region are embedded in one call of ``embed``. ``budget``: at most this
    many sentences embedded in all, spent on the regions in order (a region gets what is left, its
    sentences sharing the most query words first; with fewer than two left, the words decide).
    ``shared``: the analyses of the other queries of a batch (the same analyzer as ``terms``')."""
    shared = Shared(terms.analyzer) if shared is None else shared
    if shared.analyzer is not terms.analyzer:
        raise ValueError("match: the shared analyses were made with another analyzer than the query's terms")
    analysed = [shared.region(region) for region in regions]
    out: list[Match | None] = [None] * len(regions)
    dense: list[tuple[int, list[int], list[tuple[int, int]], list[tuple[Span, frozenset[str]]]]] = []
    texts: list[str] = []
    for i, (region, found) in enumerate(zip(regions, analysed, strict=True)):
        if not found.spans:
            continue
        left = DENSE_SENTENCES if budget is None else min(DENSE_SENTENCES, budget - len(texts))
        if by[i] == "dense" and left > 1:
            marks, distinct, count = found.marks(terms)
            lexical = found.lexical(distinct, count)
            open_ = _undecided(lexical, found.eligible, len(terms.wanted))
            if len(open_) > 1:
                chosen = _candidates(lexical, open_, left)
                dense.append((i, chosen, lexical, marks))  # the region, its sentences to embed
                texts += [" ".join(region.text[lo:hi].split()) for lo, hi in (found.spans[c] for c in chosen)]
                continue
        out[i] = _lexical_match(found, terms)
    if texts:
        if query_vector is None or embed is None:
            raise ValueError("dense sentence matching needs the query vector and an embed function")
        query = l2_normalize(np.asarray(query_vector, dtype=np.float32).reshape(1, -1))[0]
        scores = l2_normalize(np.asarray(embed(texts), dtype=np.float32)) @ query
        at = 0
        for i, chosen, lexical, marks in dense:
            cosines = {c: float(s) for c, s in zip(chosen, scores[at : at + len(chosen)], strict=True)}
            at += len(chosen)
            best = max(cosines, key=lambda c: (cosines[c], lexical[c], -c))
            spans = analysed[i].spans
            out[i] = Match(spans[best], cosines[best], "dense", spans, best, marks, analysed[i].layout)
    return out


def _lexical_match(found: _Analysed, terms: Terms) -> Match:
    """The region's sentence with the most distinct query terms, then the most occurrences, then
    the earliest (among the eligible ones)."""
    marks, distinct, count = found.marks(terms)
    marked = [s for s in distinct if s in found.is_eligible]
    best = max(marked, key=lambda s: (distinct[s], count[s], -s)) if marked else found.eligible[0]
    return Match(
        found.spans[best], float(distinct.get(best, 0)), "lexical", found.spans, best, marks, found.layout
    )


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
    layout = found.layout if found.layout is not None else _Layout.of(text, found.sentences)
    starts, ends, widths = layout.starts, layout.ends, layout.widths
    lo_doc, hi_doc = found.sentence
    a, b = bisect_left(starts, lo_doc), bisect_left(starts, hi_doc)
    budget = width - 2  # room for an ellipsis at either end

    def size(u: int, v: int) -> int:  # tokens u to v joined by spaces
        return widths[v] - widths[u] - 1 if v > u else 0

    def reach(u: int) -> int:  # the most tokens from u that fit the budget: u to this
        return bisect_right(widths, widths[u] + 1 + budget) - 1

    if size(a, b) > budget:  # a long sentence: from its start, or from just before its first term
        first = next((bisect_right(starts, s) - 1 for (s, _), _ in found.terms if lo_doc <= s < hi_doc), a)
        u = a if size(a, first + 1) <= budget * 0.6 else max(a, first - 4)
        v = max(u + 1, min(b, reach(u)))
    else:  # the sentence, then what follows it, then the whole sentences before it, while it fits
        u, v = a, max(b, min(len(starts), reach(a)))
        before = found.index - 1
        while before >= 0 and size(bisect_left(starts, found.sentences[before][0]), v) <= budget:
            u = bisect_left(starts, found.sentences[before][0])
            before -= 1
    first_doc, last_doc = found.sentences[0][0], found.sentences[-1][1]
    lead = int(starts[u] not in layout.sentence_starts or (starts[u] == first_doc and layout.mid_sentence))
    out = ("…" if lead else "") + " ".join([text[starts[i] : ends[i]] for i in range(u, v)])
    end = ends[v - 1]
    if end not in layout.sentence_ends or (end == last_doc < len(text) and text[end - 1] not in _ENDS):
        out += "…"
    if len(out) > width:  # one token longer than the snippet (a URL, a long number)
        out = out[: width - 1] + "…"

    def position(doc: int) -> int:
        i = max(u, min(bisect_right(starts, doc, u, v) - 1, v - 1))
        offset = widths[i] - widths[u] + lead + min(max(doc - starts[i], 0), ends[i] - starts[i])
        return min(offset, len(out))

    shown_lo, shown_hi = starts[u], ends[v - 1]
    sentence = (position(max(lo_doc, shown_lo)), position(min(hi_doc, shown_hi)))
    marks: list[Span] = []
    words: list[str] = []
    for (s, e), _ in found.terms:
        if s > shown_hi:
            break
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
