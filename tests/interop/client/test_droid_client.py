"""The droid client (`droid call`) against servers built on the official SDKs.

Each server is started here, on 127.0.0.1, and each case runs `droid call` as a user would:
over stdio (the server as a child process), Streamable HTTP and the 2024-11-05 HTTP+SSE
transport; pinned to a revision, or unpinned so the client's era probe decides. The
negotiated revision is read from droid's own header line and the answers are checked
against what the servers are known to return.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent.parent
DROID = os.environ.get("DROID_BIN", str(REPO / "target" / "debug" / "droid"))
PYTHON = str(HERE / ".venv" / "bin" / "python")
REFERENCE = str(HERE / "reference_server.py")
TS_SERVERS = str(HERE / "ts" / "servers.mjs")
sys.path.insert(0, str(HERE))
from harness import free_port, wait_for_port  # noqa: E402 (found through the path just set)

SIMPLE = "This is a simple text response for testing."
TIMEOUT = 60

STDIO = {
    "python": [PYTHON, REFERENCE],
    "ts-sdk1": ["node", TS_SERVERS, "sdk1-stdio"],
    "ts-sdk2": ["node", TS_SERVERS, "sdk2-stdio"],
}
HTTP = {
    "python-http": ([PYTHON, REFERENCE, "http"], "/mcp"),
    "python-sse": ([PYTHON, REFERENCE, "sse"], "/sse"),
    "ts-sdk1-http": (["node", TS_SERVERS, "sdk1-http"], "/mcp"),
    "ts-sdk1-sse": (["node", TS_SERVERS, "sdk1-sse"], "/sse"),
    "ts-sdk2-http": (["node", TS_SERVERS, "sdk2-http"], "/mcp"),
}


@pytest.fixture(scope="module")
def http_servers():
    """Every HTTP server, started once for the module and stopped after it."""
    started: dict[str, str] = {}
    procs = []
    try:
        for name, (argv, path) in HTTP.items():
            port = free_port()
            proc = subprocess.Popen(
                [*argv, str(port)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            procs.append(proc)
            started[name] = f"http://127.0.0.1:{port}{path}"
        # All started before any is waited for, so they start side by side.
        for proc, (name, url) in zip(procs, started.items()):
            wait_for_port(urlsplit(url).port, proc, name)
        yield started
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def droid_call(target: list[str] | str, method: str, params: dict | None = None, revision: str | None = None,
               as_json: bool = False) -> tuple[str | None, str]:
    """Runs `droid call`; returns (negotiated revision or None, the rest of stdout)."""
    argv = [DROID, "call"]
    if revision:
        argv += ["--revision", revision]
    if as_json:
        argv.append("--json")
    if isinstance(target, str):
        argv += [target, method]
    else:
        argv.append(method)
    if params is not None:
        argv.append(json.dumps(params))
    if not isinstance(target, str):
        argv += ["--", *target]
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}"
    out = done.stdout
    match = re.match(r"# .* at (\S+)\n", out)
    if match:
        return match.group(1), out[match.end():]
    return None, out


def check_everything(target, revision, expected):
    """tools/list, tools/call, resources/read and prompts/get, at the expected revision."""
    got, text = droid_call(target, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}, revision)
    assert got == expected
    assert text.strip() == "5"
    got, text = droid_call(target, "tools/call", {"name": "test_simple_text"}, revision)
    assert text.strip() == SIMPLE
    _, listed = droid_call(target, "tools/list", None, revision, as_json=True)
    names = {t["name"] for t in json.loads(listed)["tools"]}
    assert {"add", "test_simple_text"} <= names
    _, read = droid_call(target, "resources/read", {"uri": "test://static-text"}, revision, as_json=True)
    assert json.loads(read)["contents"][0]["uri"] == "test://static-text"
    _, prompt = droid_call(target, "prompts/get", {"name": "test_simple_prompt"}, revision, as_json=True)
    assert json.loads(prompt)["messages"][0]["role"] == "user"


# (server, pinned revision or None for the probe, the revision it must end at)
STDIO_CASES = [
    ("python", "2025-11-25", "2025-11-25"),
    ("python", "2026-07-28", "2026-07-28"),
    ("python", None, "2026-07-28"),
    ("python", "2024-11-05", "2024-11-05"),
    ("ts-sdk1", "2025-11-25", "2025-11-25"),
    ("ts-sdk1", None, "2025-11-25"),
    ("ts-sdk2", "2025-11-25", "2025-11-25"),
    ("ts-sdk2", "2026-07-28", "2026-07-28"),
    ("ts-sdk2", None, "2026-07-28"),
]


@pytest.mark.parametrize(("server", "revision", "expected"), STDIO_CASES)
def test_stdio(server, revision, expected):
    check_everything(STDIO[server], revision, expected)


HTTP_CASES = [
    ("python-http", "2025-11-25", "2025-11-25"),
    ("python-http", "2026-07-28", "2026-07-28"),
    ("python-http", None, "2026-07-28"),
    ("ts-sdk1-http", "2025-11-25", "2025-11-25"),
    ("ts-sdk1-http", "2025-03-26", "2025-03-26"),
    ("ts-sdk1-http", None, "2025-11-25"),
    ("ts-sdk2-http", "2025-11-25", "2025-11-25"),
    ("ts-sdk2-http", "2026-07-28", "2026-07-28"),
    ("ts-sdk2-http", None, "2026-07-28"),
    # The HTTP+SSE servers are found from their URL by an unpinned client, too.
    ("python-sse", "2024-11-05", "2024-11-05"),
    ("python-sse", None, "2024-11-05"),
    ("ts-sdk1-sse", None, "2024-11-05"),
]


@pytest.mark.parametrize(("server", "revision", "expected"), HTTP_CASES)
def test_http(http_servers, server, revision, expected):
    check_everything(http_servers[server], revision, expected)


def test_a_legacy_only_server_refuses_a_client_pinned_to_2026(http_servers):
    """A modern-only client in front of a legacy-only server fails with a clear error, not a hang."""
    argv = [DROID, "call", "--revision", "2026-07-28", http_servers["ts-sdk1-http"], "tools/list"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, "RUST_BACKTRACE": "0"})
    assert done.returncode != 0
    assert "does not speak 2026-07-28" in done.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
