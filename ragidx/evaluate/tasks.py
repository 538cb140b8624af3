"""Evaluation tasks: the LongEmbed synthetic tasks (generated) and real retrieval tasks (loaded).

A :class:`Task` is one or more :class:`TaskGroup` s (one per context length for passkey and needle,
one for a real task); retrieval happens only within a group, and a task's score is the unweighted
mean of its groups' main metric (LongEmbed §2.2).

* ``passkey`` and ``needle`` are generated exactly as LongEmbed describes: per length L, 100
  candidate documents shared by 50 queries, each document of exactly L model tokens (the model's
  special tokens and document prompt included, so an L-token document fills an L-token input), a
  key sentence inserted at a random sentence boundary (the reported depth) of filler text. Passkey
  filler is the fixed sentence group, needle filler is Paul Graham's essays (a data path). The
  needle facts and questions are ragidx's own (``data/needles.tsv``): LongEmbed's GPT-4 set is not
  redistributed. Generation is deterministic given the seed and the tokenizer.
* ``qmsum``: the LongEmbed-style split (``corpus.jsonl``, ``queries.jsonl``, ``qrels.jsonl``); the
  two duplicated summaries are merged (one query, both meetings relevant): 1,527 queries.
  ``qmsum:val`` (``qmsum:train``) keeps one split's meetings and queries: 35 val meetings.
* ``beir:PATH``: any BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv`` or
  ``qrels.jsonl``/``qrels.tsv``); documents are ``"{title} {text}".strip()``.
* ``longembed:CONFIG``: the ``dwzhu/LongEmbed`` layout (``CONFIG/{corpus,queries,qrels}.jsonl``,
  ``context_length`` groups for passkey/needle) from disk, or from the hub when online.

A task can be cut to a seeded **sample** of its documents (``sample=N``, e.g. to run a slow model
on a CPU): N documents drawn with the seed (per group: per length for passkey and needle), the
queries judged relevant to at least one of them, their judgements restricted to the sample. The
task is then named ``NAME[N]`` (title "QMSum, 64 docs"), so its records never mix with the full
task's; its scores are on a smaller candidate pool and compare only with other runs on the same
sample. A synthetic sample is drawn from the full task's generated documents (the same generator
and seed), so its documents are the full task's, byte for byte: their cached embeddings count
towards a later full run. About half of passkey's and needle's documents are queried, so a sample
of N documents keeps about N/2 queries.
"""

from __future__ import annotations

import bisect
import csv
import json
import os
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from ragidx.errors import ConfigError, InputError

LENGTHS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
N_DOCS, N_QUERIES = 100, 50
PASSKEY_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
LONGEMBED_CONFIGS = ("narrativeqa", "summ_screen_fd", "2wikimqa", "qmsum", "passkey", "needle")
DATA_ENV = "RAGIDX_EVAL_DATA"
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")


@dataclass
class TaskGroup:
    """Documents, queries and relevance judgements searched together (one length, or a whole task)."""

    name: str
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    length: int | None = None
    depths: dict[str, float] = field(default_factory=dict)  # synthetic: doc id → needle depth


@dataclass
class Task:
    """A named task: its groups and the metric it is ranked by."""

    name: str
    kind: Literal["synthetic", "real"]
    groups: list[TaskGroup]
    source: str

    @property
    def main_metric(self) -> str:
        return "acc@1" if self.kind == "synthetic" else "ndcg@10"


class Tokenizing(Protocol):
    """What generation needs from an encoder (``ragidx.embed.encoder.Encoder`` provides it)."""

    prefix_ids: list[int]
    suffix_ids: list[int]

    def tokenize(self, text: str, role: Literal["query", "document"] = "document") -> Any: ...


def data_dir(given: str | Path | None) -> Path | None:
    """The evaluation data folder: ``given``, else ``$RAGIDX_EVAL_DATA``, else none."""
    value = given if given is not None else os.environ.get(DATA_ENV)
    return Path(value).expanduser() if value else None


def load_task(
    spec: str,
    *,
    encoder: Tokenizing | None = None,
    data: str | Path | None = None,
    lengths: Sequence[int] = LENGTHS,
    seed: int = 0,
    sample: int | None = None,
) -> Task:
    """Build or load the task named ``spec`` (see the module docstring for the names), cut to a
    seeded sample of ``sample`` documents per group when given."""
    task = _load(spec, encoder, data_dir(data), lengths, seed)
    return sampled(task, sample, seed) if sample is not None else task


def _load(
    spec: str, encoder: Tokenizing | None, root: Path | None, lengths: Sequence[int], seed: int
) -> Task:
    if spec in ("passkey", "needle"):
        if encoder is None:
            raise ValueError("generating a synthetic task needs the encoder's tokenizer")
        if spec == "passkey":
            return passkey(encoder, lengths, seed)
        return needle(encoder, _find(root, spec, ("paul_graham_essays/essays", "essays", ".")), lengths, seed)
    if spec == "qmsum" or spec.startswith("qmsum:"):
        split = spec.partition(":")[2] or None
        return qmsum(_find(root, "qmsum", ("qmsum/longembed_style", "longembed_style", ".")), split)
    if spec.startswith("beir:"):
        return beir(Path(spec[5:]).expanduser())
    if spec.startswith("longembed:"):
        return longembed(spec[10:], root, lengths)
    raise ConfigError(
        f"unknown task {spec!r}: use passkey, needle, qmsum, qmsum:val, beir:PATH or longembed:CONFIG "
        f"({', '.join(LONGEMBED_CONFIGS)})"
    )


def _find(root: Path | None, task: str, candidates: Sequence[str]) -> Path:
    marker = "corpus.jsonl" if task == "qmsum" else "*.txt"
    if root is None:
        raise InputError(f"task {task}: no data folder; pass --data-dir or set ${DATA_ENV}")
    for sub in candidates:
        folder = root / sub
        if folder.is_dir() and any(folder.glob(marker)):
            return folder
    wanted = "corpus.jsonl, queries.jsonl, qrels.jsonl" if task == "qmsum" else "Paul Graham essays (*.txt)"
    raise InputError(f"{root}: no {task} data found (looked in {', '.join(candidates)} for {wanted})")


def sampled(task: Task, n: int, seed: int = 0) -> Task:
    """``task`` with each group cut to ``n`` documents drawn with ``seed`` and the queries judged on
    them (the whole task when it has no more than ``n`` documents)."""
    if n < 1:
        raise ConfigError(f"a sample needs at least one document; got {n}")
    if all(len(g.corpus) <= n for g in task.groups):
        return task
    groups = []
    for group in task.groups:
        rng = random.Random(f"sample/{seed}/{task.name}/{group.name}")
        kept = set(rng.sample(sorted(group.corpus), min(n, len(group.corpus))))
        qrels = {
            qid: judged
            for qid, all_judged in group.qrels.items()
            if (judged := {d: r for d, r in all_judged.items() if d in kept})
            and any(r > 0 for r in judged.values())
        }
        if not qrels:
            raise InputError(f"{task.source}: no query is judged on the {n} sampled documents; sample more")
        groups.append(
            TaskGroup(
                group.name,
                {d: t for d, t in group.corpus.items() if d in kept},
                {q: t for q, t in group.queries.items() if q in qrels},
                qrels,
                group.length,
                {d: v for d, v in group.depths.items() if d in kept},
            )
        )
    total = max(len(g.corpus) for g in task.groups)
    source = f"{task.source} (sample of {n} of {total} documents, seed {seed})"
    return Task(f"{task.name}[{n}]", task.kind, groups, source)


def sample_size(name: str) -> tuple[str, int | None]:
    """``("qmsum", 64)`` for ``"qmsum[64]"``; ``(name, None)`` for a task that is not a sample."""
    base, bracket, rest = name.partition("[")
    if bracket and rest.endswith("]") and rest[:-1].isdigit():
        return base, int(rest[:-1])
    return name, None


# ----------------------------------------------------------------------------- synthetic tasks
def check_lengths(lengths: Sequence[int]) -> list[int]:
    """The lengths, validated against LongEmbed's set and sorted."""
    bad = [n for n in lengths if n not in LENGTHS]
    if bad or not lengths:
        raise ConfigError(f"lengths must be among {', '.join(map(str, LENGTHS))}; got {list(lengths)}")
    return sorted(set(lengths))


def passkey(encoder: Tokenizing, lengths: Sequence[int] = LENGTHS, seed: int = 0) -> Task:
    """Personalised passkey retrieval (LongEmbed §2.2)."""
    lengths = check_lengths(lengths)
    names = json.loads(resources.files("ragidx.evaluate").joinpath("data/names.json").read_text("utf-8"))
    people = [f"{a} {b}" for a in names["first"] for b in names["last"]]
    filler = " ".join([PASSKEY_FILLER] * (max(lengths) // 16 + 8))
    haystack = _Haystack(encoder, filler)
    groups = []
    for length in lengths:
        rng = random.Random(f"passkey/{seed}/{length}")
        chosen = rng.sample(people, N_DOCS)
        keys = [rng.randint(10000, 99999) for _ in range(N_DOCS)]
        needles = [
            f"{p}'s pass key is {k}. Remember it. {k} is the pass key for {p}."
            for p, k in zip(chosen, keys, strict=True)
        ]
        questions = [f"what is the passkey for {p}?" for p in chosen]
        groups.append(_group("passkey", length, haystack, needles, questions, rng))
    return Task("passkey", "synthetic", groups, f"generated (seed {seed})")


def needle_pairs() -> list[tuple[str, str]]:
    """ragidx's 100 (fact, question) pairs for the needle task."""
    text = resources.files("ragidx.evaluate").joinpath("data/needles.tsv").read_text("utf-8")
    rows = list(csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
    return [(r["fact"], r["question"]) for r in rows]


def needle(encoder: Tokenizing, essays: Path, lengths: Sequence[int] = LENGTHS, seed: int = 0) -> Task:
    """Needle in a haystack of Paul Graham essays (LongEmbed §2.2), with ragidx's own needles."""
    lengths = check_lengths(lengths)
    # essays of more than 1,000 bytes: leaves out the rss.txt stub (and the 655-byte pow.txt)
    files = sorted(p for p in essays.glob("*.txt") if p.stat().st_size > 1000)
    text = "\n\n".join(" ".join(p.read_text(encoding="utf-8").split()) for p in files)
    haystack = _Haystack(encoder, text)
    pairs = needle_pairs()
    groups = []
    for length in lengths:
        rng = random.Random(f"needle/{seed}/{length}")
        order = rng.sample(range(len(pairs)), N_DOCS)
        needles = [pairs[i][0] for i in order]
        questions = [pairs[i][1] for i in order]
        groups.append(_group("needle", length, haystack, needles, questions, rng))
    return Task("needle", "synthetic", groups, f"generated from {essays} (seed {seed})")


def _group(
    task: str,
    length: int,
    haystack: _Haystack,
    needles: list[str],
    questions: list[str],
    rng: random.Random,
) -> TaskGroup:
    corpus: dict[str, str] = {}
    depths: dict[str, float] = {}
    for i, text in enumerate(needles):
        doc_id = f"{task}-{length}-d{i:03d}"
        corpus[doc_id], depths[doc_id] = haystack.insert(text, length, rng.random())
    picked = sorted(rng.sample(range(len(needles)), N_QUERIES))
    ids = list(corpus)
    queries = {f"{task}-{length}-q{j:02d}": questions[i] for j, i in enumerate(picked)}
    qrels = {qid: {ids[i]: 1} for qid, i in zip(queries, picked, strict=True)}
    return TaskGroup(str(length), corpus, queries, qrels, length, depths)


class _Haystack:
    """Filler text tokenized once; cuts it to a token budget and inserts a needle at a sentence
    boundary so that the result is exactly the asked length in the model's tokens."""

    def __init__(self, encoder: Tokenizing, text: str):
        self.encoder = encoder
        self.text = text
        tokens = encoder.tokenize(text, "document")
        if tokens.offsets is None:
            raise ConfigError("synthetic tasks need a fast tokenizer (one that reports character offsets)")
        self.ends = [e for _, e in tokens.offsets]
        self.overhead = len(encoder.prefix_ids) + len(encoder.suffix_ids) + len(tokens.prompt_ids)
        boundaries = [0, *(m.end() for m in _SENTENCE_END.finditer(text))]
        self.boundaries = boundaries
        self.boundary_tokens = [bisect.bisect_right(self.ends, c) for c in boundaries]

    def count(self, text: str) -> int:
        return len(self.encoder.tokenize(text, "document"))

    def insert(self, needle: str, length: int, depth: float) -> tuple[str, float]:
        """A document of ``length`` tokens with ``needle`` once at about ``depth``; returns the text
        and the needle's actual depth (content tokens before it / content tokens)."""
        target = length - self.overhead
        budget = target - self.count(needle)
        if budget < 1:
            raise ConfigError(f"a {length}-token document cannot hold the needle {needle[:40]!r}…")
        for _ in range(8):
            if budget > len(self.ends):
                raise InputError(f"the haystack text is too short for {length}-token documents")
            cut = self.ends[budget - 1]
            at = bisect.bisect_right(self.boundary_tokens, round(depth * budget)) - 1
            char = min(self.boundaries[at], cut)
            before, after = self.text[:char].rstrip(), self.text[char:cut].strip()
            text = " ".join(part for part in (before, needle, after) if part)
            n = self.count(text)
            if n == target:
                return text, self.count(before) / target if before else 0.0
            budget += target - n
        raise InputError(f"cannot build a document of exactly {length} tokens with this tokenizer")


# ----------------------------------------------------------------------------- real tasks
def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise InputError(
                    f"{path}:{number}: not a JSON object ({exc}); fix or remove the line"
                ) from exc
            if not isinstance(record, dict):
                raise InputError(f"{path}:{number}: not a JSON object; fix or remove the line")
            yield record


def _field(record: dict[str, Any], keys: Sequence[str], path: Path) -> str:
    for key in keys:
        if key in record and record[key] is not None:
            return str(record[key])
    raise InputError(f"{path}: a record has none of the fields {', '.join(keys)}")


_DOC_ID = ("_id", "id", "doc_id", "corpus-id", "corpus_id")
_QUERY_ID = ("_id", "id", "qid", "query_id", "query-id")


QMSUM_SPLITS = ("train", "val")


def qmsum(folder: Path, split: str | None = None) -> Task:
    """QMSum, LongEmbed-style split, duplicate summaries merged (1,529 → 1,527 queries).

    ``split`` ("train" or "val") keeps only that split's meetings and their queries (the task is
    then ``qmsum:val``): a model trained on the train meetings (``ragidx train``) is evaluated on
    meetings it never saw."""
    group = _read_beir_like(folder, qrels_file=folder / "qrels.jsonl")
    name = "qmsum"
    if split is not None:
        if split not in QMSUM_SPLITS:
            raise ConfigError(f"unknown QMSum split {split!r}: use qmsum, qmsum:train or qmsum:val")
        keep = {
            _field(r, _DOC_ID, folder / "corpus.jsonl")
            for r in _jsonl(folder / "corpus.jsonl")
            if r.get("split") == split
        }
        if not keep:
            raise InputError(f"{folder / 'corpus.jsonl'}: no meeting has \"split\": \"{split}\"")
        group.corpus = {d: t for d, t in group.corpus.items() if d in keep}
        group.qrels = {q: {d: v for d, v in j.items() if d in keep} for q, j in group.qrels.items()}
        group.qrels = {q: j for q, j in group.qrels.items() if j}
        group.queries = {q: t for q, t in group.queries.items() if q in group.qrels}
        name = f"qmsum:{split}"
    by_text: dict[str, str] = {}
    for qid, text in list(group.queries.items()):
        first = by_text.setdefault(text, qid)
        if first != qid:
            group.qrels[first].update(group.qrels.pop(qid, {}))
            del group.queries[qid]
    return Task(name, "real", [group], str(folder))


def beir(folder: Path, split: str = "test") -> Task:
    """A BEIR-format folder."""
    if not (folder / "corpus.jsonl").is_file():
        raise InputError(
            f"{folder}: not a BEIR folder (no corpus.jsonl); expected corpus.jsonl, queries.jsonl, qrels/"
        )
    for qrels in (folder / "qrels" / f"{split}.tsv", folder / "qrels.jsonl", folder / "qrels.tsv"):
        if qrels.is_file():
            return Task(f"beir:{folder.name}", "real", [_read_beir_like(folder, qrels)], str(folder))
    raise InputError(f"{folder}: no qrels (looked for qrels/{split}.tsv, qrels.jsonl, qrels.tsv)")


def _read_beir_like(folder: Path, qrels_file: Path, name: str = "all") -> TaskGroup:
    corpus: dict[str, str] = {}
    for record in _jsonl(folder / "corpus.jsonl"):
        text = f"{record.get('title') or ''} {_field(record, ('text', 'contents'), folder / 'corpus.jsonl')}"
        corpus[_field(record, _DOC_ID, folder / "corpus.jsonl")] = text.strip()
    queries = {
        _field(r, _QUERY_ID, folder / "queries.jsonl"): _field(r, ("text", "query"), folder / "queries.jsonl")
        for r in _jsonl(folder / "queries.jsonl")
    }
    qrels = _read_qrels(qrels_file)
    unknown = [d for judged in qrels.values() for d in judged if d not in corpus]
    if unknown:
        raise InputError(f"{qrels_file}: judges document {unknown[0]!r}, which is not in corpus.jsonl")
    qrels = {q: judged for q, judged in qrels.items() if q in queries and any(v > 0 for v in judged.values())}
    queries = {q: t for q, t in queries.items() if q in qrels}
    if not queries:
        raise InputError(f"{qrels_file}: no query has a relevant document in the corpus")
    return TaskGroup(name, corpus, queries, qrels)


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    if path.suffix == ".jsonl":
        for r in _jsonl(path):
            qid, doc = _field(r, (*_QUERY_ID, "query-id"), path), _field(r, _DOC_ID, path)
            qrels.setdefault(qid, {})[doc] = int(r.get("score", r.get("relevance", 1)))
        return qrels
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    for number, line in enumerate(lines, start=1):
        parts = line.split("\t") if "\t" in line else line.split()
        if not parts or (number == 1 and not parts[-1].lstrip("-").isdigit()):
            continue  # blank line or header
        if len(parts) == 4:  # TREC qrels: qid iter doc rel
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
            raise InputError(f"{path}:{number}: expected query-id<TAB>corpus-id<TAB>score")
        qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return qrels


def longembed(config: str, root: Path | None, lengths: Sequence[int] = LENGTHS) -> Task:
    """A ``dwzhu/LongEmbed`` config from ``root`` (``root/CONFIG`` or ``root/LongEmbed/CONFIG``),
    else from the Hugging Face hub."""
    if config not in LONGEMBED_CONFIGS:
        raise ConfigError(f"unknown LongEmbed config {config!r}: use one of {', '.join(LONGEMBED_CONFIGS)}")
    folder = next(
        (
            root / sub / config
            for sub in (".", "LongEmbed", "longembed")
            if root is not None and (root / sub / config / "corpus.jsonl").is_file()
        ),
        None,
    )
    if folder is not None:
        read: Callable[[str], list[dict[str, Any]]] = lambda split: list(_jsonl(folder / f"{split}.jsonl"))  # noqa: E731
        source = str(folder)
    else:
        read, source = _hub_reader(config), f"hf:dwzhu/LongEmbed/{config}"
    corpus_rows, query_rows, qrel_rows = read("corpus"), read("queries"), read("qrels")
    where = Path(source)
    synthetic = config in ("passkey", "needle")
    wanted = set(check_lengths(lengths)) if synthetic else {None}

    def group_of(row: dict[str, Any]) -> int | None:
        return int(row["context_length"]) if synthetic and "context_length" in row else None

    groups = []
    for length in sorted(wanted, key=lambda n: n or 0):
        corpus = {_field(r, _DOC_ID, where): r["text"] for r in corpus_rows if group_of(r) == length}
        queries = {_field(r, _QUERY_ID, where): r["text"] for r in query_rows if group_of(r) == length}
        qrels: dict[str, dict[str, int]] = {}
        for r in qrel_rows:
            qid = _field(r, _QUERY_ID, where)
            if qid in queries:
                qrels.setdefault(qid, {})[_field(r, _DOC_ID, where)] = int(r.get("score", 1))
        if not corpus or not qrels:
            raise InputError(f"{source}: no documents or judged queries for {config} {length or ''}".rstrip())
        queries = {q: t for q, t in queries.items() if q in qrels}
        groups.append(TaskGroup(str(length) if length else "all", corpus, queries, qrels, length))
    return Task(config, "synthetic" if synthetic else "real", groups, source)


def _hub_reader(config: str) -> Callable[[str], list[dict[str, Any]]]:
    """Rows of ``dwzhu/LongEmbed`` from the hub: with ``datasets`` when installed, else the JSONL
    files through ``huggingface_hub``. Offline, a one-line error says how to work from disk."""
    offline = (
        f"cannot reach the Hugging Face hub for dwzhu/LongEmbed/{config}; download it and pass "
        f"--data-dir (a folder holding {config}/corpus.jsonl)"
    )
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise InputError(offline + " (HF_HUB_OFFLINE is set)")
    try:
        import datasets  # type: ignore[import-not-found]

        def from_datasets(split: str) -> list[dict[str, Any]]:
            try:
                return list(datasets.load_dataset("dwzhu/LongEmbed", name=config, split=split))
            except Exception as exc:  # datasets raises many types for network/hub failures
                raise InputError(f"{offline} ({type(exc).__name__})") from exc

        return from_datasets
    except ImportError:
        pass
    from huggingface_hub import snapshot_download

    try:
        local = Path(
            snapshot_download("dwzhu/LongEmbed", repo_type="dataset", allow_patterns=[f"{config}/*"])
        )
    except Exception as exc:  # network, auth and hub errors all mean: not available here
        raise InputError(f"{offline} ({type(exc).__name__})") from exc
    return lambda split: list(_jsonl(local / config / f"{split}.jsonl"))
