"""`tevviz app`: where to serve (flags, then Gradio's environment), checked before any model loads, then the app."""

from __future__ import annotations

import os

from ..engine.errors import TevvizError
from ..options import source_from_args

PORTS = (1, 65535)

def server_settings(args) -> dict:
    """Flags first, then Gradio's own environment variables, then this machine only and no share link."""
    port = args.server_port
    if port is None and os.environ.get("GRADIO_SERVER_PORT"):
        try:
            port = int(os.environ["GRADIO_SERVER_PORT"])
        except ValueError:
            raise TevvizError("GRADIO_SERVER_PORT must be a number, "
                              f"got {os.environ['GRADIO_SERVER_PORT']!r}") from None
    share = args.share
    if share is None:
        share = os.environ.get("GRADIO_SHARE", "").strip().lower() in ("1", "true", "yes")
    return {"server_name": args.server_name or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1",
            "server_port": port, "share": share}

def check_server(name: str, port: int | None, port_flag: str) -> None:
    """Fail in one line, before any model loads, when the app could not serve on `name`:`port`."""
    import errno
    import socket

    if port is not None and not PORTS[0] <= port <= PORTS[1]:
        raise TevvizError(f"{port_flag} must lie in [{PORTS[0]}, {PORTS[1]}], got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(name, port or 0, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        why = getattr(e, "strerror", None) or e
        raise TevvizError(f"--server-name {name!r}: no such address here ({why})") from None
    # The test Gradio makes itself: a bind with SO_REUSEADDR fails only where a server listens. Without a port, any
    # free one tells whether the address is this machine's; Gradio then takes 7860 or the next free port itself.
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise TevvizError(f"port {port} on {name} is in use: give {port_flag} a free port, or leave it out "
                                  "for 7860 or the next free one") from None
            where = f"{name} port {port}" if port is not None else name
            raise TevvizError(f"cannot serve on {where} ({e.strerror}): change --server-name"
                              + (f" or {port_flag}" if port is not None else "")) from None

def cmd_app(args) -> int:
    settings = server_settings(args)
    check_server(settings["server_name"], settings["server_port"],
                 "--server-port" if args.server_port is not None else "GRADIO_SERVER_PORT")
    if args.threads is not None and args.threads < 1:
        raise TevvizError(f"--threads must be at least 1, got {args.threads}")
    from ..app import launch  # gradio: a second or more, after the checks that need none

    try:
        launch(source=source_from_args(args), model_dirs=tuple(args.model_dir), preload=True, threads=args.threads,
               **settings)
    except OSError as e:
        # Gradio's own failure to bind (a port taken since the check above) or a model file that cannot be read.
        if "empty port" in str(e):
            raise TevvizError(f"port {settings['server_port']} on {settings['server_name']} is in use: pass "
                              "--server-port with a free port") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TevvizError(f"the app could not start: {first}") from None
    return 0
