"""``ragidx mcp``: serve indexes to agents over the Model Context Protocol (the official ``mcp`` SDK).

The server is :mod:`ragidx.integrations.mcp`; this command opens each ``--index`` once with its model
(the HTTP server's :class:`~ragidx.integrations.server.live.LiveIndex`: warmed up, new generations
swapped in), then speaks MCP on stdin/stdout (``--transport stdio``, what an MCP host starts) or as
streamable HTTP at ``/mcp`` (``--transport http``; the socket is bound before anything loads, so a
taken port is one clear line). Nothing but the protocol goes to stdout; messages go to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ragidx.cli.console import err, handle_errors
from ragidx.cli.options import DEFAULT_INDEX, Device
from ragidx.cli.threads import Threads, apply_threads
from ragidx.embed.config import EncoderConfig
from ragidx.errors import ConfigError

Transport = Literal["stdio", "http"]


@handle_errors
def mcp_command(
    index: Annotated[
        list[Path] | None,
        typer.Option(
            "--index",
            "-i",
            help="Index directory to serve; repeat for several (default: env RAGIDX_INDEX, else "
            f"{DEFAULT_INDEX}). Only these can be read.",
            show_default=False,
        ),
    ] = None,
    transport: Annotated[
        Transport,
        typer.Option(help="stdio: an MCP host starts this command; http: streamable HTTP at /mcp."),
    ] = "stdio",
    host: Annotated[
        str, typer.Option(help="--transport http: address to listen on (this machine only by default).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="--transport http: TCP port (0: any free port).")
    ] = 8765,
    threads: Threads = None,
    reload_interval: Annotated[
        float,
        typer.Option(
            "--reload-interval", min=0, help="Seconds between checks for a new index generation (0: never)."
        ),
    ] = 2.0,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Check that the indexes were built with this model."),
    ] = None,
    device: Device = None,
) -> None:
    """Serve indexes to AI agents over MCP (Model Context Protocol), read-only: tools search (query,
    k, mode, filters → passages with doc_id, source, span and score), fetch_document (a document or
    a span of it) and index_info; each index's documents as resources. Bad arguments get a one-line
    tool error; an index not named here is refused.

    Register it with an MCP host (Claude Desktop, an IDE, an agent framework) as the command
    ragidx mcp --index /abs/path/to/index ; see the README (MCP server) for the JSON entry.

    Examples:  ragidx mcp --index my-index ;  ragidx mcp -i docs-index -i code-index ;
    ragidx mcp --index my-index --transport http --port 8765
    """
    try:
        import uvicorn

        from ragidx.cli.serve import listen
        from ragidx.integrations.mcp import create_server
        from ragidx.integrations.server.live import LiveIndex
    except ImportError as exc:
        raise ConfigError(f"ragidx mcp needs the MCP SDK ({exc}): pip install 'ragidx[mcp]'") from exc
    directories = index or [Path(DEFAULT_INDEX)]
    apply_threads(threads)
    runtime = {"device": device, "model": model}
    encoder_config = EncoderConfig.model_validate({k: v for k, v in runtime.items() if v is not None})
    listener = listen(host, port) if transport == "http" else None  # a taken port fails before loading
    try:
        indexes = [
            LiveIndex(directory, encoder_config=encoder_config, reload_interval=reload_interval)
            for directory in directories
        ]
        server = create_server(indexes)
    except BaseException:
        if listener is not None:
            listener.close()
        raise
    names = ", ".join(
        f"{d} (generation {live.current.number})" for d, live in zip(directories, indexes, strict=True)
    )
    if listener is None:
        err.print(f"ragidx mcp: serving {names} over stdio", highlight=False, markup=False)
        server.run("stdio")
        return
    bound = listener.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    err.print(f"ragidx mcp: serving {names} at http://{url_host}:{bound}/mcp", highlight=False, markup=False)
    app = server.streamable_http_app(host=host)
    uvicorn.Server(uvicorn.Config(app, host=host, port=bound, log_level="warning")).run(sockets=[listener])
