"""The official Python SDK client against `droid serve --listen` with authorization on.

The test plays the authorization server: it makes a P-256 key, publishes it as a JWKS on a
loopback HTTP server, starts droid with `--auth-issuer`/`--auth-jwks-url` and one tool made to
require a scope, and signs access tokens for droid's own resource URI. The SDK client gets the
pre-issued token as an `Authorization` header on its HTTP client, as an application that
obtained it elsewhere would pass it.

It starts its own server, so it runs once, under the stdio driver; the HTTP drivers skip it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest
from mcp import Client

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        os.environ.get("INTEROP_TRANSPORT", "stdio") != "stdio",
        reason="starts its own authorized server; runs once, under the stdio driver",
    ),
]

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bearer, stop  # noqa: E402 (found through the path just set)
from issuer import Issuer  # noqa: E402

SCOPED_TOOL = "test_simple_text"
SCOPE = "tools:text"


@pytest.fixture(scope="module")
def authorized():
    issuer = Issuer()
    cmd = shlex.split(os.environ.get("DROID_SERVER_CMD", f"{REPO}/target/debug/droid serve"))
    if Path(cmd[0]).name != "droid":
        issuer.close()
        pytest.skip("authorization flags are droid's own")
    proc = subprocess.Popen(
        [*cmd, "--listen", "127.0.0.1:0", "--auth-issuer", issuer.issuer,
         "--auth-jwks-url", f"{issuer.url}/jwks", "--auth-scope", f"{SCOPED_TOOL}={SCOPE}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    url = None
    deadline = time.time() + 10
    assert proc.stderr is not None
    while time.time() < deadline and url is None:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+/mcp)", line)
        if m:
            url = m.group(1)
    if url is None:
        proc.kill()
        issuer.close()
        pytest.fail("droid serve did not report its address")
    # Drained, so a chatty server never blocks on a full pipe.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    yield issuer, url
    stop(proc)
    issuer.close()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_authorized_call_with_a_pre_issued_token(authorized, mode):
    issuer, url = authorized
    token = issuer.token(url, SCOPE)
    async with Client(bearer(url, token), mode=mode, read_timeout_seconds=30) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert SCOPED_TOOL in names
        result = await client.call_tool(SCOPED_TOOL)
        assert not result.is_error
        assert any(getattr(c, "text", None) for c in result.content)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_token_without_the_scope_does_not_see_the_tool(authorized, mode):
    issuer, url = authorized
    token = issuer.token(url, "")
    async with Client(bearer(url, token), mode=mode, read_timeout_seconds=30) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert SCOPED_TOOL not in names
        assert "test_image_content" in names


async def test_no_token_is_challenged_with_the_metadata_url(authorized):
    issuer, url = authorized
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10)) as http:
        r = await http.post(url, json=body,
                            headers={"accept": "application/json, text/event-stream"})
        assert r.status_code == 401
        challenge = r.headers["www-authenticate"]
        metadata_url = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
        assert f'resource_metadata="{metadata_url}"' in challenge
        metadata = (await http.get(metadata_url)).json()
        assert metadata["resource"] == url
        assert metadata["authorization_servers"] == [issuer.issuer]
        assert SCOPE in metadata["scopes_supported"]
        wrong = issuer.token("http://127.0.0.1:1/mcp", SCOPE)
        r = await http.post(url, json=body, headers={
            "accept": "application/json, text/event-stream", "authorization": f"Bearer {wrong}"})
        assert r.status_code == 401
        assert 'error="invalid_token"' in r.headers["www-authenticate"]
