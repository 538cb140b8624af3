"""Fixtures for the LangChain integration tests (skipped where langchain-core is not installed)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")
