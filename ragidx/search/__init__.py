"""Stage 4, search: queries in, ranked documents out.

* :mod:`~ragidx.search.retriever` — :class:`~ragidx.search.retriever.Retriever`: embed queries,
  search the index's vectors, merge chunk hits into documents, snippets;
* :mod:`~ragidx.search.filters` — :class:`~ragidx.search.filters.Filter`: the one filter language of
  ``--where``, the server's ``where``, LangChain's ``filter`` and ``Index.search(where=…)``;
* :mod:`~ragidx.search.fusion` — scoring: best-N means and the fusion of document and chunk scores;
* :mod:`~ragidx.search.rerank` — :class:`~ragidx.search.rerank.Reranker`: a cross-encoder re-scores
  the first stage's best documents on their best passages (``rerank=`` / ``--rerank``);
* :mod:`~ragidx.search.trec` — TREC run and query files (the evaluation's and ``query --run-out``'s I/O).

Imports embed and index; the evaluation and the integrations import it.
"""
