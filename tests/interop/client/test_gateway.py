"""`droid gateway` end to end, with the official Python SDK client as each session.

Real upstreams: the project's fixture server (`droid serve`, over stdio), a server built
on the official TypeScript SDK (1.x, Streamable HTTP with sessions) and npm's
`@modelcontextprotocol/server-everything`. The gateway
runs in progressive mode over HTTP. Sessions search, activate and call deferred tools;
then the TypeScript upstream changes a tool's definition under them (a "rug pull"): the
activation must be dropped, the call refused naming the drift, and the drift logged with
both digests.
"""

from __future__ import annotations

import json
import os
import re
import sys
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent.parent
DROID = str(REPO / "target" / "debug" / "droid")
TS_SERVERS = str(HERE / "ts" / "servers.mjs")
sys.path.insert(0, str(HERE))
from harness import bearer, free_port, wait_for_port  # noqa: E402 (found through the path just set)
from issuer import Issuer  # noqa: E402

DISCOVERY = {"search_tools", "activate_tools", "deactivate_tools", "call_tool"}
# The project's fixture server as an upstream, in the gateway's TOML.
FIXTURE_UPSTREAM = f"""
[[upstream]]
name = "fixture"
command = ["{DROID}", "serve"]
trust = "on-first-use"
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A TS upstream, then the gateway in front of it and of `droid serve`."""
    folder = tmp_path_factory.mktemp("gateway")
    ts_port, gw_port = free_port(), free_port()
    ts = subprocess.Popen(["node", TS_SERVERS, "sdk1-http", str(ts_port)],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [ts]
    try:
        wait_for_port(ts_port, ts, "the TypeScript server")
        config = folder / "gateway.toml"
        config.write_text(f"""
mode = "progressive"
{FIXTURE_UPSTREAM}
[[upstream]]
name = "ts"
url = "http://127.0.0.1:{ts_port}/mcp"
revision = "2025-11-25"
trust = "on-first-use"
""")
        log = folder / "gateway.log"
        gw = subprocess.Popen([DROID, "gateway", "--config", str(config), "--listen", f"127.0.0.1:{gw_port}"],
                              env=kept_in(folder), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=log.open("w"))
        procs.append(gw)
        wait_for_port(gw_port, gw, "the gateway")
        yield {"url": f"http://127.0.0.1:{gw_port}/mcp", "ts": f"http://127.0.0.1:{ts_port}", "log": log}
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait()



def kept_in(folder: Path) -> dict[str, str]:
    """The environment for a gateway whose state (first-use trust, its admin socket) goes to
    `folder`, never to the user's own state directory."""
    return {**os.environ, "XDG_STATE_HOME": str(folder / "state")}


class Notices:
    def __init__(self):
        self.methods: list[str] = []

    async def __call__(self, message) -> None:
        inner = getattr(message, "root", message)
        method = getattr(inner, "method", None)
        if isinstance(method, str):
            self.methods.append(method)


def session(url: str, notices: Notices) -> Client:
    return Client(url, mode="legacy", message_handler=notices, read_timeout_seconds=30)


def names(listed) -> set[str]:
    return {t.name for t in listed.tools}


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


async def eventually(check, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await anyio.sleep(0.1)


@pytest.mark.anyio
async def test_search_activate_call_and_a_rug_pull(gateway):
    notices = Notices()
    async with session(gateway["url"], notices) as client:
        # Progressive: only the discovery tools to begin with.
        assert names(await client.list_tools()) == DISCOVERY

        found = await client.call_tool("search_tools", {"query": "add two numbers"})
        assert not found.is_error, text(found)
        ids = [t["id"] for t in found.structured_content["tools"]]
        assert "ts/add" in ids, ids

        # A deferred tool is not callable before activation, and looks unknown.
        with pytest.raises(Exception, match="unknown tool"):
            await client.call_tool("ts/add", {"a": 2, "b": 3})

        activated = await client.call_tool("activate_tools", {"ids": ["ts/add"]})
        assert not activated.is_error, text(activated)
        await eventually(lambda: _async(lambda: "notifications/tools/list_changed" in notices.methods),
                         "tools/list_changed after activation")
        assert names(await client.list_tools()) == DISCOVERY | {"ts/add"}
        assert text(await client.call_tool("ts/add", {"a": 2, "b": 3})) == "5"

        # The rug pull: the upstream changes `add` under the running session.
        urllib.request.urlopen(urllib.request.Request(gateway["ts"] + "/admin/rug-pull", method="POST"), timeout=10)

        async def dropped():
            return "ts/add" not in names(await client.list_tools())

        await eventually(dropped, "the drifted activation to be dropped")
        with pytest.raises(Exception, match=r"ts/add changed after it was activated"):
            await client.call_tool("ts/add", {"a": 2, "b": 3})

        # The drift is in the gateway's log with both digests.
        log = gateway["log"].read_text()
        line = next((l for l in log.splitlines() if "an upstream changed a tool's definition" in l and "ts/add" in l), None)
        assert line is not None, log[-3000:]
        digests = re.findall(r"[0-9a-f]{64}", line)
        assert len(digests) == 2 and digests[0] != digests[1], line

        # The drifted tool is unverified now, and an unverified tool never reaches a
        # session: a search neither finds it nor shows the poisoned description.
        searched = await client.call_tool("search_tools", {"query": "add two numbers elsewhere"})
        assert not searched.is_error, text(searched)
        ids = [t["id"] for t in searched.structured_content["tools"]]
        assert "ts/add" not in ids, ids
        assert "elsewhere" not in text(searched), text(searched)

        # Re-activation needs the operator, and the refusal does not say the tool exists.
        again = await client.call_tool("activate_tools", {"ids": ["ts/add"]})
        assert again.is_error and "not in the catalog" in text(again), text(again)
        assert "unverified" not in text(again), text(again)


async def _async(fn):
    return fn()


@pytest.mark.anyio
async def test_two_sessions_see_only_their_own_activations(gateway):
    a_notices, b_notices = Notices(), Notices()
    async with session(gateway["url"], a_notices) as a, session(gateway["url"], b_notices) as b:
        assert not (await a.call_tool("activate_tools", {"ids": ["fixture/echo"]})).is_error
        assert not (await b.call_tool("activate_tools", {"ids": ["fixture/test_simple_text"]})).is_error
        assert names(await a.list_tools()) == DISCOVERY | {"fixture/echo"}
        assert names(await b.list_tools()) == DISCOVERY | {"fixture/test_simple_text"}
        assert text(await a.call_tool("fixture/echo", {"text": "hi"})) == "hi"
        assert text(await b.call_tool("fixture/test_simple_text", {})) == "This is a simple text response for testing."
        with pytest.raises(Exception, match="unknown tool"):
            await a.call_tool("fixture/test_simple_text", {})
        with pytest.raises(Exception, match="unknown tool"):
            await b.call_tool("fixture/echo", {"text": "hi"})
        # Each session was told of its own activation only once: B's did not reach A.
        await anyio.sleep(0.5)
        assert a_notices.methods.count("notifications/tools/list_changed") == 1, a_notices.methods
        assert b_notices.methods.count("notifications/tools/list_changed") == 1, b_notices.methods


@pytest.mark.anyio
async def test_a_scoped_tool_is_hidden_from_a_caller_without_the_scope(tmp_path):
    """`[scopes]` in the configuration: an anonymous caller neither sees nor can call the tool."""
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(f"""{FIXTURE_UPSTREAM}
[scopes]
"fixture/echo" = "tools:echo"
""")
    gw = subprocess.Popen([DROID, "gateway", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
                          env=kept_in(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, gw, "the gateway")
        async with session(f"http://127.0.0.1:{port}/mcp", Notices()) as client:
            listed = names(await client.list_tools())
            assert "fixture/add" in listed and "fixture/echo" not in listed, listed
            with pytest.raises(Exception, match="unknown tool"):
                await client.call_tool("fixture/echo", {"text": "hi"})
            assert text(await client.call_tool("fixture/add", {"a": 1, "b": 2})) == "3"
    finally:
        gw.kill()
        gw.wait()


@pytest.mark.anyio
async def test_a_stateless_request_is_its_own_session_and_keeps_no_activation(gateway):
    """At 2026-07-28 over HTTP an anonymous request stands alone: activating is refused, and
    says why; the tool found is called by its exact id instead, and nothing is kept."""
    async with Client(gateway["url"], mode="2026-07-28", read_timeout_seconds=30) as client:
        assert names(await client.list_tools()) == DISCOVERY
        refused = await client.call_tool("activate_tools", {"ids": ["fixture/echo"]})
        assert refused.is_error and "its own session" in text(refused), text(refused)
        found = await client.call_tool("search_tools", {"query": "echo"})
        assert "fixture/echo" in [t["id"] for t in found.structured_content["tools"]]
        called = await client.call_tool("call_tool", {"id": "fixture/echo", "arguments": {"text": "by id"}})
        assert not called.is_error and text(called) == "by id", text(called)
        assert names(await client.list_tools()) == DISCOVERY
        with pytest.raises(Exception, match="unknown tool"):
            await client.call_tool("fixture/echo", {"text": "hi"})
        # What a session may not have, it may not call by id either.
        hidden = await client.call_tool("call_tool", {"id": "nowhere/nothing", "arguments": {}})
        assert hidden.is_error and "not in the catalog" in text(hidden), text(hidden)


EVERYTHING = HERE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


@pytest.mark.anyio
async def test_an_mcp_servers_file_with_env_and_headers_works_unchanged(tmp_path):
    """The `mcpServers` JSON users keep for Claude Desktop or Cursor, unchanged: npm's
    server-everything over stdio with an `env` drawn from the gateway's environment, a
    TypeScript SDK server over HTTP that refuses callers without its X-Api-Key header, and a
    server that cannot start. The two that can start serve; the third is reported and retried."""
    ts_port, gw_port = free_port(), free_port()
    key = "k-" + str(ts_port)
    ts = subprocess.Popen(["node", TS_SERVERS, "sdk1-http", str(ts_port)],
                          env={**os.environ, "INTEROP_REQUIRE_API_KEY": key},
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [ts]
    try:
        wait_for_port(ts_port, ts, "the TypeScript server")
        # Without the key the TypeScript server refuses: the header below is what lets the
        # gateway in.
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{ts_port}/mcp", data=b"{}", method="POST"), timeout=10)
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({
            "mcpServers": {
                "everything": {
                    "command": "node",
                    "args": [str(EVERYTHING), "stdio"],
                    "env": {"GREETING": "${env:INTEROP_GREETING}"},
                },
                "ts": {
                    "type": "http",
                    "url": f"http://127.0.0.1:{ts_port}/mcp",
                    "headers": {"X-Api-Key": "${env:INTEROP_TS_KEY}"},
                },
                "broken": {"command": "/nonexistent/mcp-server"},
            },
        }))
        env = {**os.environ, "INTEROP_GREETING": "hello from the gateway's environment",
               "INTEROP_TS_KEY": key, "INTEROP_SECRET_NOT_PASSED": "do not leak",
               "XDG_STATE_HOME": str(tmp_path / "state")}
        log = tmp_path / "gateway.log"
        gw = subprocess.Popen([DROID, "gateway", "--config", str(config), "--listen", f"127.0.0.1:{gw_port}"],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w"))
        procs.append(gw)
        wait_for_port(gw_port, gw, "the gateway")
        async with session(f"http://127.0.0.1:{gw_port}/mcp", Notices()) as client:
            listed = names(await client.list_tools())
            assert {"everything/get-env", "everything/echo", "ts/add"} <= listed, listed
            assert not any(n.startswith("broken/") for n in listed), listed

            # `env` reached the stdio server, expanded; nothing else of the gateway's did.
            printed = json.loads(text(await client.call_tool("everything/get-env", {})))
            assert printed.get("GREETING") == "hello from the gateway's environment", printed
            assert "INTEROP_SECRET_NOT_PASSED" not in printed and "INTEROP_TS_KEY" not in printed, printed

            # `headers` reached the HTTP server, expanded.
            assert text(await client.call_tool("ts/add", {"a": 2, "b": 3})) == "5"
            echoed = await client.call_tool("everything/echo", {"message": "through the gateway"})
            assert "through the gateway" in text(echoed), text(echoed)

        # The broken server was reported by name, and what was trusted on first use was kept.
        assert 'upstream "broken"' in log.read_text(), log.read_text()[-2000:]
        kept = list((tmp_path / "state" / "droid" / "gateway").glob("*.json"))
        assert len(kept) == 1, kept
        trusted = json.loads(kept[0].read_text())["trustedOnFirstUse"]
        assert "everything/get-env" in trusted["everything"] and "ts/add" in trusted["ts"], trusted
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait()


@pytest.mark.anyio
async def test_a_principal_keeps_its_activations_across_2026_requests(tmp_path):
    """Authenticated 2026-07-28 callers keep activations by principal, across requests and
    clients; another principal sees none of them, and calls by exact id instead."""
    issuer = Issuer()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config = tmp_path / "gateway.toml"
    config.write_text(f"""
mode = "progressive"
{FIXTURE_UPSTREAM}""")
    gw = subprocess.Popen([DROID, "gateway", "--config", str(config), "--listen", f"127.0.0.1:{port}",
                           "--auth-issuer", issuer.issuer, "--auth-jwks-url", f"{issuer.url}/jwks"],
                          env=kept_in(tmp_path),
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, gw, "the gateway")
        alice, bob = issuer.token(url, "", sub="alice"), issuer.token(url, "", sub="bob")
        async with Client(bearer(url, alice), mode="2026-07-28", read_timeout_seconds=30) as client:
            activated = await client.call_tool("activate_tools", {"ids": ["fixture/echo"]})
            assert not activated.is_error, text(activated)
        # A new client, the same principal: the activation is there.
        async with Client(bearer(url, alice), mode="2026-07-28", read_timeout_seconds=30) as client:
            assert names(await client.list_tools()) == DISCOVERY | {"fixture/echo"}
            assert text(await client.call_tool("fixture/echo", {"text": "alice"})) == "alice"
        async with Client(bearer(url, bob), mode="2026-07-28", read_timeout_seconds=30) as client:
            assert names(await client.list_tools()) == DISCOVERY
            with pytest.raises(Exception, match="unknown tool"):
                await client.call_tool("fixture/echo", {"text": "bob"})
            called = await client.call_tool("call_tool", {"id": "fixture/echo", "arguments": {"text": "bob"}})
            assert text(called) == "bob", text(called)
            assert names(await client.list_tools()) == DISCOVERY
        # Alice deactivates: gone for her too.
        async with Client(bearer(url, alice), mode="2026-07-28", read_timeout_seconds=30) as client:
            assert not (await client.call_tool("deactivate_tools", {"ids": ["fixture/echo"]})).is_error
            assert names(await client.list_tools()) == DISCOVERY
    finally:
        gw.kill()
        gw.wait()
        issuer.close()
