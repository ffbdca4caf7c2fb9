"""Ports on the host's loopback: one nothing listens on now (for a server we start), and whether one is taken.

Shared below the rooms: the gateway gives them to apps it starts in their own processes, sandbox providers to
the servers in their sandboxes.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now, on the host's loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port (0: a free one), for a server we run: bound before it starts, so a
    taken port is said plainly by the caller (OSError) instead of ending the process inside uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # The protocol named: asyncio turns Nagle's algorithm off only on sockets that say they are TCP, and with it
    # on, a reply's headers and body (two writes) meet the client's delayed ACK: ~40 ms a keep-alive request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock
