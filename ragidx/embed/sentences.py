"""English sentence ends for sentence-placed landmarks (LMK pooling, ``landmark_placement =
"sentence"``).

The LMK authors split with ``mediacloud/sentence-splitter`` (``SentenceSplitter(language="en")``,
their ``eval_scripts/landmark_index.py``): Philipp Koehn and Josh Schroeder's heuristic from the
Europarl tools. :func:`sentence_ends` re-implements its English rules on character offsets of the
original text, so that ragidx can tokenize the text once and place a landmark after the token that
ends each sentence:

* ``?`` or ``!``, or two or more periods, then spaces and a sentence starter (opening quotes or
  brackets, then an upper-case or caseless letter, e.g. CJK) end a sentence;
* ``.``, ``?`` or ``!`` with closing quotes or brackets after it, then spaces and a starter, end one
  after the closing marks; so do ``.?!`` followed by spaces, opening quotes and an upper-case letter;
* a space-separated word ending in periods ends one when the next word starts (after opening marks)
  with an upper-case letter or a digit, unless the word is a known abbreviation (``Mr.``, ``Dr.``,
  ``e.g.``, ``etc.``, single capitals, months …: :data:`NON_BREAKING`), an upper-case acronym
  (``U.S.``), or ``No.``/``Art.``/``pp.`` before a number;
* every line break ends one (the splitter keeps the text's newlines, and splits on them).

What differs from the authors' pipeline: the text is split without the model's prompt in front of
it (a landmark never falls inside the prompt); blank lines add no landmark (the authors' empty
"sentences" between two newlines each add one); their fallback to the unsplit text when the
sentences' joined length falls under 90% of the text's (runs of spaces and blank lines) is not
applied. (As in the splitter, only spaces and line breaks separate words: a tab after a period ends
no sentence.) Their code splits, then tokenizes each sentence alone; ragidx tokenizes the whole
text once and maps each end to the token that holds its last character. The ids are the same for
WordPiece and SentencePiece tokenizers; byte-level BPE ones (RoBERTa, ModernBERT) differ, where a
sentence's first word tokenized alone loses its leading-space form. (ragidx's ``sentence_grouped``
placement keeps its own regex splitter, ``ragidx.embed.encoder._SENTENCE_END``.)

Checked against sentence-splitter 1.4 itself: the same sentence ends (blank lines aside) on 49 Paul
Graham essays, 20 QMSum meetings and 20,000 random strings of abbreviations, quotes, brackets,
dots, digits, CJK and line breaks.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from functools import cache

# Abbreviations after which a period does not end a sentence (the English list the splitter ships,
# from the Moses tools): every single capital letter, and these.
_TITLES = (
    "Adj Adm Adv Asst Bart Bldg Brig Bros Capt Cmdr Col Comdr Con Corp Cpl DR Dr Drs Ens Gen Gov Hon "
    "Hosp Hr Insp Lt MM MR MRS MS Maj Messrs Mlle Mme Mr Mrs Ms Msgr Op Ord Pfc Ph Prof Pvt Rep Reps "
    "Res Rev Rt Sen Sens Sfc Sgt Sr St Supt Surg Jr Co Inc Ph.D PhD Nos Nr"
)
_OTHERS = "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Okt Nov Dec Fig fig al cf e.g i.e esp etc no rev vs"
NON_BREAKING: frozenset[str] = frozenset(
    [chr(c) for c in range(ord("A"), ord("Z") + 1)] + _TITLES.split() + _OTHERS.split()
)
# … and those that do not end one before a number only ("No. 5", "Art. 3", "pp. 10").
NUMERIC_ONLY: frozenset[str] = frozenset({"No", "Art", "pp"})


@cache
def _punctuation(category: str) -> str:
    """Every character of a Unicode punctuation category below U+3000 (Pi: ‘ “ « …; Pf: ’ ” » …)."""
    return "".join(chr(c) for c in range(0x3000) if unicodedata.category(chr(c)) == category)


@cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    opening = re.escape("'\"([¿¡" + _punctuation("Pi"))
    opening_no_paren = re.escape("'\"[¿¡" + _punctuation("Pi"))
    closing = re.escape("'\")]" + _punctuation("Pf"))
    # Each pattern ends where the sentence ends; group 1 is the character that must start the next.
    return (
        re.compile(rf"[?!](?= +[{opening}]*(.))"),
        re.compile(rf"\.\.+(?= +[{opening}]*(.))"),
        re.compile(rf"[?!.] *[{closing}]+(?= +[{opening}]* *(.))"),
        re.compile(rf"[?!.](?= +[{opening_no_paren}]+ *(.))"),
        re.compile(rf"([\w.\-]*)([{closing}%]*)\.+$"),  # a word ending in periods (searched)
        re.compile(rf"^[{opening}]*(.)"),  # the first letter of the next word
    )


def _starts_sentence(char: str) -> bool:
    """An upper-case or caseless (CJK, Thai …) letter."""
    return unicodedata.category(char) in ("Lu", "Lo")


def _acronym(word: str) -> bool:
    """``U.S.``, ``A.B-C.``: a period, then capitals (or ``-``), then the final periods."""
    core = word.rstrip(".")
    run = len(core)
    while run and (_starts_sentence(core[run - 1]) or core[run - 1] == "-"):
        run -= 1
    return run < len(core) and run > 0 and core[run - 1] == "."


def sentence_ends(text: str) -> list[int]:
    """Sorted character offsets at which a sentence of ``text`` ends (exclusive; after its last
    non-space character), the end of the text included when it holds anything but whitespace."""
    punct_after_starter, dots, closing, opening, period_word, next_word = _patterns()
    ends: set[int] = set()
    work = text
    for pattern in (punct_after_starter, dots, closing, opening):
        # in order, each seeing the breaks of those before as the splitter's substitutions do
        # (``. " Then`` ends after the quote, and so not also after the period)
        breaks = [m.end() for m in pattern.finditer(work) if _starts_sentence(m.group(1))]
        if breaks:
            chars = list(work)
            for at in breaks:
                chars[at] = "\n"  # the first space after the end: the same length, no match across
            work = "".join(chars)
            ends.update(breaks)
    words = [(m.start(), m.group()) for m in re.finditer(r"[^ \n]+", work)]
    for (start, word), (_, following) in itertools.pairwise(words):
        found = period_word.search(word)
        if found is None:
            continue
        prefix, marks = found.group(1), found.group(2)
        if (prefix in NON_BREAKING and not marks) or _acronym(word):
            continue
        first = next_word.match(following)
        if first is None or not (_starts_sentence(first.group(1)) or first.group(1) in "0123456789"):
            continue
        if prefix in NUMERIC_ONLY and not marks and following[0] in "0123456789":
            continue
        ends.add(start + len(word))
    for line in re.finditer(r"[^\n]*\S[^\n]*", text):  # each line that holds text ends one
        ends.add(line.start() + len(line.group().rstrip()))
    return sorted(ends)
