"""Questions about the Paul Graham essays (the needle-in-a-haystack filler in ``../shared/data``),
shared by the benchmarks that search them (``passages.py``, ``rerank_latency.py``)."""

QUESTIONS = [
    "Why should the government create a visa for startup founders?",
    "What did the author work on before college?",
    "How do you get good startup ideas?",
    "Why are some programming languages more powerful than others?",
    "What makes a city a good place for startups?",
    "How should founders think about raising money from investors?",
]
