"""Ports and polling helpers shared by the rig."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


class RigError(RuntimeError):
    """A piece of the test rig could not be started; the message says what to install or check."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise RigError(f"timed out after {timeout:.0f} s waiting for {what}")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
