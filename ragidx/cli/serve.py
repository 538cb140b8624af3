"""``ragidx serve``: load an index and its model once, answer searches over HTTP (FastAPI + uvicorn).

The application is :mod:`ragidx.integrations.server`; this command reads the settings (flags over
``[serve]`` of a config file), sets the CPU threads, binds the socket itself (so that a busy port is
one clear line before anything loads, and ``--port 0`` can print the port it got), opens the index
and runs uvicorn until Ctrl-C or SIGTERM, after which it shuts down gracefully and exits 0.
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from ragidx.cli.console import err, handle_errors
from ragidx.cli.options import DEFAULT_INDEX, ConfigFile, Device, IndexDir, RerankSpec
from ragidx.cli.threads import Threads, apply_threads, threads_in_use
from ragidx.config import RagidxConfig
from ragidx.embed.config import EncoderConfig
from ragidx.errors import ConfigError
from ragidx.search.options import Rerank

NOT_LOCAL = (
    "warning: listening on {host}: anyone who can reach it can search the index, with no TLS and no "
    "authentication; put a reverse proxy with TLS and authentication in front (README: Serving)"
)


@handle_errors
def serve_command(
    index: IndexDir = Path(DEFAULT_INDEX),
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default 127.0.0.1: this machine only).", show_default=False),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="TCP port (default 8000; 0: any free port).", show_default=False),
    ] = None,
    threads: Threads = None,
    reload_interval: Annotated[
        float | None,
        typer.Option(
            "--reload-interval",
            min=0,
            help="Seconds between checks for a new index generation (default 2; 0: never reload).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Plain searches run at once (default 2).", show_default=False),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Seconds a search may take, waiting included; past it the answer is 503 (default 10).",
            show_default=False,
        ),
    ] = None,
    work_budget: Annotated[
        int | None,
        typer.Option(
            "--work-budget",
            min=1,
            help="The most work one search may ask for, in plain results (sentences dense: 100 each, "
            "with_text: +1); more is refused with 422 (default 2000).",
            show_default=False,
        ),
    ] = None,
    config: ConfigFile = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Check that the index was built with this model."),
    ] = None,
    device: Device = None,
    rerank: RerankSpec = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No access log, warnings only.")] = False,
) -> None:
    """Answer searches over HTTP: the index and its model are loaded once, so a query costs
    milliseconds instead of a start-up. When an ingest or delete commits a new generation, the
    server loads it and switches to it whole.

    POST /search with JSON {"text": "…", "k": 10, "mode": "hybrid", "per": "document", "where":
    {"lang": "en"}}; GET /health, GET /info; the API is described at /docs and
    /openapi.json. It listens on 127.0.0.1 only: for other hosts, put a reverse proxy with TLS and
    authentication in front (see the README). Every request is bounded (GET /info lists the limits):
    searches run --workers at a time, heavy ones apart; one over --work-budget is refused (422), one
    past --timeout or beyond a full queue is answered 503 with Retry-After.

    --rerank MODEL[:N] reranks every search with a cross-encoder, loaded once at start-up (a request
    with "rerank": false skips it); reranked searches run in the heavy lane.

    Examples:  ragidx serve --index my-index ;  ragidx serve -i my-index --port 9000 --threads 2 ;
    curl -s localhost:8000/search -H 'content-type: application/json' -d '{"text": "bees", "k": 3}'
    """
    settings = (
        RagidxConfig.load(config)
        .override(
            serve={
                "host": host,
                "port": port,
                "threads": threads,
                "reload_interval": reload_interval,
                "workers": workers,
                "timeout": timeout,
                "work_budget": work_budget,
            }
        )
        .serve
    )
    try:
        import uvicorn

        from ragidx.integrations.server import LiveIndex, create_app
        from ragidx.integrations.server.limits import Limits
    except ImportError as exc:
        raise ConfigError(
            f"ragidx serve needs FastAPI and uvicorn ({exc}): pip install 'ragidx[serve]'"
        ) from exc
    apply_threads(settings.threads)
    runtime = {"device": device, "model": model}
    encoder_config = EncoderConfig.model_validate({k: v for k, v in runtime.items() if v is not None})
    reranking = None if rerank is None else Rerank.parse(rerank)
    listener = listen(settings.host, settings.port)  # a taken port fails before the model loads
    try:
        live = LiveIndex(
            index, encoder_config=encoder_config, reload_interval=settings.reload_interval, rerank=reranking
        )
    except BaseException:
        listener.close()
        raise
    used = threads_in_use()
    bound_port = listener.getsockname()[1]
    if not _is_local(settings.host):
        err.print(NOT_LOCAL.format(host=settings.host), highlight=False, markup=False)
    url_host = f"[{settings.host}]" if ":" in settings.host else settings.host
    err.print(
        f"serving {index} (generation {live.current.number}, {used} thread{'s' * (used != 1)}) at "
        f"http://{url_host}:{bound_port}  (API: /docs)",
        highlight=False,
        markup=False,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(live, threads=used, limits=Limits.from_options(settings)),
            host=settings.host,
            port=bound_port,
            log_level="warning" if quiet else "info",
            access_log=not quiet,
        )
    )
    with _stopping_is_success():
        server.run(sockets=[listener])


@contextlib.contextmanager
def _stopping_is_success() -> Iterator[None]:
    """uvicorn shuts down gracefully on SIGINT or SIGTERM, then raises the signal again for the
    handlers it found; these do nothing, so a server stopped on request exits 0."""
    handled = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, lambda number, frame: None) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (one clear error when the address is taken or wrong)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"--host {host}: not an address to listen on ({exc})") from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen ({exc.strerror}); pick another --port"
        ) from exc
    return listener


def _is_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
