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
