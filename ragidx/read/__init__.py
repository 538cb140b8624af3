"""Stage 1, read: files on disk → :class:`~ragidx.read.documents.Document` objects.

Walks files and folders, detects text encodings, extracts text from plain text, Markdown, HTML,
PDF and JSONL, streams large files, and reports every file it cannot use as a ``Skipped`` entry
with a one-line reason. Imports nothing from the later stages.
"""
