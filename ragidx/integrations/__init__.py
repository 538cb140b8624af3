"""Integrations with other frameworks, each an optional extra (``pip install ragidx[langchain]``).

Nothing here is imported by ``import ragidx``: a framework is only needed when its integration is.
"""
