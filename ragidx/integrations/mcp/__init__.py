"""An MCP server over ragidx indexes (``ragidx mcp``), for agents and MCP hosts: the official ``mcp``
SDK, stdio or streamable HTTP, a thin shell over :meth:`Index.search
<ragidx.index.directory.Index.search>`.

* :mod:`~ragidx.integrations.mcp.indexes` — :class:`Served`: the indexes named at start-up, the only
  ones a tool may read;
* :mod:`~ragidx.integrations.mcp.server` — :func:`create_server`: the tools (``search``,
  ``fetch_document``, ``index_info``) and the documents as resources, read-only.

Needs the MCP SDK and FastAPI (the indexes are the HTTP server's
:class:`~ragidx.integrations.server.live.LiveIndex`): ``pip install 'ragidx[mcp]'``.
"""

from __future__ import annotations

try:
    import mcp.server.mcpserver  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"ragidx.integrations.mcp needs the MCP SDK 2 ({exc}): pip install 'ragidx[mcp]'"
    ) from exc

from ragidx.integrations.mcp.indexes import Served
from ragidx.integrations.mcp.server import create_server

__all__ = ["Served", "create_server"]
