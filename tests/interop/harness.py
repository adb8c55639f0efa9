"""What the interop tests do around the SDKs: pick a free loopback port, wait until a
process they started listens on it, stop that process, and give an SDK client the
streams of an HTTP connection that presents a bearer token.

Imported the way `issuer` is: the test puts this folder on `sys.path` first.
"""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client


def free_port() -> int:
    """A port nothing listens on now; the process it is given to binds it a moment later."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, what: str, log: Path | None = None) -> None:
    """Returns once `proc` accepts connections on `port`; fails the test if it exits first or
    takes more than 30 s, with the end of its `log` when there is one."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = f": {log.read_text()[-2000:]}" if log else ""
                pytest.fail(f"{what} did not start listening on {port}{tail}")
            time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    """Asks `proc` to end, so it can stop what it started itself, and kills it after 5 s."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@asynccontextmanager
async def bearer(url: str, token: str):
    """Streamable HTTP streams for `mcp.Client` whose every request carries `token`, as an
    application that obtained the token elsewhere would pass it."""
    headers = {"authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams
