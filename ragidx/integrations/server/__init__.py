"""An HTTP search server over one index (``ragidx serve``): FastAPI + uvicorn, a thin shell over
:meth:`Index.search <ragidx.index.directory.Index.search>`.

* :mod:`~ragidx.integrations.server.api` — the requests and responses (pydantic, unknown fields refused);
* :mod:`~ragidx.integrations.server.live` — :class:`LiveIndex`: the index and its model loaded once,
  the next generation loaded and swapped in when a commit makes one;
* :mod:`~ragidx.integrations.server.app` — :func:`create_app`: the endpoints.

Needs FastAPI and uvicorn (``pip install 'ragidx[serve]'``).
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("ragidx.integrations.server needs FastAPI: pip install 'ragidx[serve]'") from exc

from ragidx.integrations.server.app import create_app
from ragidx.integrations.server.live import LiveIndex

__all__ = ["LiveIndex", "create_app"]
