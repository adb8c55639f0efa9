"""Python SDK (`mcp` 2.3.0) `mcp.Client` driving `droid serve` over stdio or Streamable HTTP, in both eras.

The transport is INTEROP_TRANSPORT: "stdio" (default, spawns DROID_SERVER_CMD per client) or "http"
(`mcp.client.streamable_http.streamable_http_client` against INTEROP_HTTP_URL, a `droid serve --listen`
run.sh started, through an httpx2 transport that records every exchange, so resumption and the legacy
back-channel can be asserted on the HTTP traffic).

The era is chosen by `mcp.Client(mode=...)`:
  * "legacy"      - the initialize handshake (the client offers 2025-11-25, LATEST_HANDSHAKE_VERSION);
  * "2026-07-28"  - stateless: the client adopts a synthesized DiscoverResult without any probe, so
                    the first thing the server sees is an ordinary request with the `_meta` envelope;
  * "auto"        - (the SDK default) `server/discover` on the same process first, falling back to
                    initialize on that same process; checked separately at the end.
"""

from __future__ import annotations

import json
import os
import time
import re
import shlex
import sys
import warnings
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tasks_extension import Tasks  # noqa: E402 (found through the path just set)

FIXTURE = json.loads((Path(__file__).resolve().parent.parent / "fixture.json").read_text())
TEXTS = FIXTURE["texts"]
ANSWERS = FIXTURE["client"]
MODERN = "2026-07-28"
MODES = ["legacy", MODERN]

TRANSPORT = os.environ.get("INTEROP_TRANSPORT", "stdio")
HTTP = TRANSPORT == "http"

pytestmark = pytest.mark.anyio
warnings.filterwarnings("ignore", category=DeprecationWarning)


def server_params() -> StdioServerParameters:
    raw = os.environ.get("DROID_SERVER_CMD", "").split()
    if not raw:
        raise RuntimeError('DROID_SERVER_CMD is not set (e.g. "/work/main/target/debug/droid serve")')
    return StdioServerParameters(command=raw[0], args=raw[1:], env=dict(os.environ))


# ----------------------------------------------------------------------------------------- HTTP recording


@dataclass
class Exchange:
    """One HTTP request the SDK made, its status, and (for an event stream) the whole body text."""

    method: str
    headers: dict[str, str]
    body: Any
    status: int | None = None
    content_type: str = ""
    sse: str = ""
    done: anyio.Event = field(default_factory=anyio.Event)


class _RecordedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, entry: Exchange) -> None:
        self._inner, self._entry = inner, entry

    async def __aiter__(self):
        try:
            async for chunk in self._inner:
                self._entry.sse += chunk.decode("utf-8", "replace")
                yield chunk
        finally:
            self._entry.done.set()

    async def aclose(self) -> None:
        self._entry.done.set()
        await self._inner.aclose()


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Passes every request to a real transport and appends an `Exchange` to `log`."""

    def __init__(self, log: list[Exchange]) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._log = log

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raw = request.content if request.method == "POST" else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        entry = Exchange(request.method, {k.lower(): v for k, v in request.headers.items()}, body)
        self._log.append(entry)
        response = await self._inner.handle_async_request(request)
        entry.status = response.status_code
        entry.content_type = response.headers.get("content-type", "")
        if "text/event-stream" in entry.content_type:
            response.stream = _RecordedStream(response.stream, entry)
        else:
            entry.done.set()
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def recorded_http(url: str, log: list[Exchange]):
    timeout = httpx2.Timeout(30, read=300)
    async with httpx2.AsyncClient(transport=RecordingTransport(log), timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def parse_sse(text: str) -> list[dict[str, Any]]:
    events = []
    for block in re.split(r"\n\n+", text.replace("\r\n", "\n").replace("\r", "\n")):
        if not block.strip():
            continue
        ev: dict[str, Any] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                ev["data"] = value if "data" not in ev else ev["data"] + "\n" + value
            elif name in ("id", "event"):
                ev[name] = value
            elif name == "retry":
                ev["retry"] = int(value)
        events.append(ev)
    return events


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(e["data"]) for e in parse_sse(text) if e.get("data")]


def call_post(log: list[Exchange], name: str) -> Exchange:
    posts = [e for e in log if e.method == "POST" and isinstance(e.body, dict)
             and e.body.get("method") == "tools/call" and (e.body.get("params") or {}).get("name") == name]
    assert posts, f"no POST of tools/call {name} recorded"
    return posts[-1]


async def ended(entry: Exchange) -> None:
    with anyio.fail_after(5):
        await entry.done.wait()


async def assert_back_channel(log: list[Exchange], name: str, method: str) -> None:
    """Legacy HTTP: the `method` request travelled on the call's POST event stream and was answered by a POST."""
    post = call_post(log, name)
    await ended(post)
    assert "text/event-stream" in post.content_type, post.content_type
    msgs = sse_messages(post.sse)
    req = [i for i, m in enumerate(msgs) if m.get("method") == method and "id" in m]
    resp = [i for i, m in enumerate(msgs) if m.get("id") == post.body["id"] and ("result" in m or "error" in m)]
    assert req, f"{name}: no {method} request on the POST stream: {msgs}"
    assert resp and resp[0] > req[0], f"{name}: the result must follow the {method} request on the same stream"
    answer = [e for e in log if e.method == "POST" and isinstance(e.body, dict) and e.body.get("id") == msgs[req[0]]["id"]
              and "result" in e.body and "method" not in e.body]
    assert answer, f"{name}: the client's answer to {method} was not POSTed"
    await ended(answer[0])
    assert answer[0].headers.get("mcp-session-id") == post.headers.get("mcp-session-id")
    assert answer[0].status == 202, answer[0].status


async def assert_resumed(log: list[Exchange], name: str) -> tuple[Exchange, Exchange, dict[str, Any]]:
    """The call's POST stream was primed (id, empty data, retry 500) and closed without the response; the client
    then sent GET + Last-Event-ID (the priming id, same session) and that stream carried the result."""
    post = call_post(log, name)
    await ended(post)
    assert post.status == 200 and "text/event-stream" in post.content_type, (post.status, post.content_type)
    events = parse_sse(post.sse)
    priming = next((e for e in events if "id" in e and not e.get("data")), None)
    assert priming, f"no priming event on the POST stream: {post.sse!r}"
    assert priming.get("retry") == 500, post.sse
    assert not any(m.get("id") == post.body["id"] for m in sse_messages(post.sse)), "the POST stream must close unanswered"
    after = log[log.index(post) + 1:]
    gets = [e for e in after if e.method == "GET" and "last-event-id" in e.headers]
    assert gets, f"no GET with Last-Event-ID after the POST: {[(e.method, e.headers.get('last-event-id')) for e in after]}"
    get = gets[0]
    assert get.headers["last-event-id"] == priming["id"]
    assert get.headers.get("mcp-session-id") == post.headers.get("mcp-session-id")
    assert get.status == 200, get.status
    await ended(get)
    results = [m for m in sse_messages(get.sse) if m.get("id") == post.body["id"] and "result" in m]
    assert results, f"the resumed GET stream did not carry the result: {get.sse!r}"
    assert results[0]["result"]["content"] == [{"type": "text", "text": "Reconnection test completed"}]
    return post, get, priming


def fill_elicitation(schema: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        if prop.get("enum"):
            content[key] = prop["enum"][0]
        elif prop.get("oneOf") and "const" in prop["oneOf"][0]:
            content[key] = prop["oneOf"][0]["const"]
        elif prop.get("type") == "string":
            content[key] = ANSWERS["elicitName"] if key == "name" else ANSWERS["elicitString"]
        elif prop.get("type") in ("integer", "number"):
            content[key] = 42
        elif prop.get("type") == "boolean":
            content[key] = True
        elif prop.get("type") == "array":
            items = prop.get("items") or {}
            if items.get("enum"):
                content[key] = [items["enum"][0]]
            elif items.get("anyOf") and "const" in items["anyOf"][0]:
                content[key] = [items["anyOf"][0]["const"]]
            else:
                content[key] = []
    return content


ROOTS = [{"uri": "file:///tmp/droid-interop-root", "name": "interop-root"}]
JSON_SCHEMA_ARGS = {
    "name": "Interop",
    "address": {"street": "1 Main St", "city": "Springfield"},
    "contactMethod": "email",
    "email": "interop@example.com",
}
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"


@dataclass
class Recorder:
    sampling: list[types.CreateMessageRequestParams] = field(default_factory=list)
    elicitation: list[Any] = field(default_factory=list)
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)
    roots: list[int] = field(default_factory=list)
    notifications: list[str] = field(default_factory=list)
    called: set[str] = field(default_factory=set)
    http: list[Exchange] = field(default_factory=list)


def make_client(mode: str, rec: Recorder, *, sampling_cb: bool = True, extensions: list[Any] | None = None) -> Client:
    async def sampling(_ctx, params: types.CreateMessageRequestParams):
        rec.sampling.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=ANSWERS["samplingAnswer"]),
            model="interop-model",
            stop_reason="endTurn",
        )

    async def elicitation(_ctx, params):
        rec.elicitation.append(params)
        return types.ElicitResult(action="accept", content=fill_elicitation(params.requested_schema))

    async def list_roots(_ctx):
        rec.roots.append(1)
        return types.ListRootsResult(roots=[types.Root(uri=r["uri"], name=r["name"]) for r in ROOTS])

    async def logging(params: types.LoggingMessageNotificationParams):
        rec.logs.append(params)

    async def messages(message) -> None:
        inner = getattr(message, "root", message)
        method = getattr(inner, "method", None)
        if isinstance(method, str):
            rec.notifications.append(method)

    if HTTP:
        url = os.environ.get("INTEROP_HTTP_URL")
        if not url:
            raise RuntimeError("INTEROP_HTTP_URL is not set (run.sh starts `droid serve --listen 127.0.0.1:0` and sets it)")
        server: Any = recorded_http(url, rec.http)
    else:
        server = server_params()
    return Client(
        server,
        mode=mode,
        sampling_callback=sampling if sampling_cb else None,
        elicitation_callback=elicitation,
        list_roots_callback=list_roots,
        logging_callback=logging,
        message_handler=messages,
        client_info=types.Implementation(name="droid-interop-python", version="2.3.0"),
        read_timeout_seconds=30,
        extensions=extensions,
    )


@pytest.fixture(scope="module", params=MODES)
async def conn(request):
    rec = Recorder()
    async with make_client(request.param, rec) as client:
        original = client.session.call_tool

        async def recording_call_tool(name, *args, **kwargs):
            rec.called.add(name)
            return await original(name, *args, **kwargs)

        client.session.call_tool = recording_call_tool  # every tools/call, direct or via Client, is recorded
        yield request.param, client, rec


def era(mode: str) -> str:
    return "modern" if mode == MODERN else "legacy"


def only_text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result.content
    assert result.content[0].type == "text", result.content[0]
    return result.content[0].text


def only_block(result: types.CallToolResult) -> Any:
    """The single content block of a tool result that is not an error."""
    assert not result.is_error and len(result.content) == 1
    return result.content[0]


def only_content(result: types.ReadResourceResult) -> Any:
    """The single entry of a resources/read result."""
    assert len(result.contents) == 1
    return result.contents[0]


# ----------------------------------------------------------------------------------------- session


async def test_negotiated_version(conn):
    mode, client, _ = conn
    if mode == "legacy":
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name
        caps = client.server_capabilities
        for c in ("tools", "resources", "prompts", "logging", "completions"):
            assert getattr(caps, c) is not None, f"capability {c} missing"
    else:
        pytest.skip("mode='2026-07-28' adopts a synthesized DiscoverResult: no handshake on the wire (see test_server_discover)")


async def test_server_discover(conn):
    mode, client, _ = conn
    if mode == "legacy":
        pytest.skip("server/discover is a 2026-07-28 method")
    assert client.protocol_version == MODERN
    raw = await client.session.send_discover(MODERN)  # client.session.discover() would return the adopted stub
    result = types.DiscoverResult.model_validate(raw)
    assert MODERN in result.supported_versions
    assert result.capabilities.tools is not None
    assert result.capabilities.resources is not None
    assert result.capabilities.prompts is not None
    info = (result.meta or {}).get("io.modelcontextprotocol/serverInfo")
    assert info and info.get("name"), f"serverInfo missing from discover _meta: {result.meta}"


# ----------------------------------------------------------------------------------------- tools


async def test_tools_list(conn):
    mode, client, _ = conn
    tools = {t.name: t for t in (await client.list_tools()).tools}
    missing = [n for n in FIXTURE["tools"][era(mode)] if n not in tools]
    assert not missing, f"tools/list lacks {missing}"
    for name in FIXTURE["tools"][era(mode)]:
        assert tools[name].description, f"{name} has no description"
        assert tools[name].input_schema.get("type") == "object", f"{name} inputSchema"
    for name in tools:
        assert re.fullmatch(r"[A-Za-z0-9_./-]{1,64}", name), name


async def test_simple_text(conn):
    _, client, _ = conn
    r = await client.call_tool("test_simple_text")
    assert not r.is_error
    assert only_text(r) == TEXTS["simple"]


async def test_image_content(conn):
    _, client, _ = conn
    c = only_block(await client.call_tool("test_image_content"))
    assert (c.type, c.mime_type, c.data) == ("image", "image/png", FIXTURE["png"])


async def test_audio_content(conn):
    _, client, _ = conn
    c = only_block(await client.call_tool("test_audio_content"))
    assert (c.type, c.mime_type, c.data) == ("audio", "audio/wav", FIXTURE["wav"])


async def test_embedded_resource(conn):
    _, client, _ = conn
    c = only_block(await client.call_tool("test_embedded_resource"))
    assert c.type == "resource"
    assert (str(c.resource.uri), c.resource.mime_type, c.resource.text) == (
        "test://embedded-resource",
        "text/plain",
        TEXTS["embedded"],
    )


async def test_multiple_content_types(conn):
    _, client, _ = conn
    r = await client.call_tool("test_multiple_content_types")
    assert not r.is_error
    assert [c.type for c in r.content] == ["text", "image", "resource"]
    text, image, resource = r.content
    assert text.text == TEXTS["mixedHeader"]
    assert (image.mime_type, image.data) == ("image/png", FIXTURE["png"])
    assert str(resource.resource.uri) == "test://mixed-content-resource"
    assert resource.resource.mime_type == "application/json"
    assert json.loads(resource.resource.text) == json.loads(TEXTS["mixedResource"])


async def test_error_handling(conn):
    _, client, _ = conn
    r = await client.call_tool("test_error_handling")  # a JSON-RPC error would raise MCPError here
    assert r.is_error is True
    assert only_text(r) == TEXTS["error"]


async def test_tool_with_progress(conn):
    _, client, _ = conn
    events: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((progress, total))

    r = await client.call_tool("test_tool_with_progress", progress_callback=on_progress)
    assert only_text(r) == "Tool with progress executed successfully"
    assert not r.is_error
    assert len(events) >= 3, events
    assert all(b[0] >= a[0] for a, b in zip(events, events[1:])), events
    assert events[:3] == [(0, 100), (50, 100), (100, 100)]


async def test_tool_with_logging(conn):
    mode, client, rec = conn
    meta = None
    if mode == "legacy":
        await client.set_logging_level("debug")
    else:
        meta = {LOG_LEVEL_META: "debug"}  # 2026: per-request opt-in
    rec.logs.clear()
    r = await client.call_tool("test_tool_with_logging", meta=meta)
    assert only_text(r) == "Tool with logging executed successfully"
    await wait_for(lambda: len(rec.logs) >= 3, "three notifications/message")
    info = [entry.data for entry in rec.logs if entry.level == "info"]
    assert info[:3] == TEXTS["logMessages"], rec.logs


async def call_asking(conn, tool: str, arguments: dict[str, Any], method: str) -> types.CallToolResult:
    """Calls `tool`, which asks the client a `method` question: a server-to-client request in a
    legacy session, which over HTTP must travel on the call's own POST event stream; an
    input_required round at 2026-07-28."""
    mode, client, rec = conn
    r = await client.call_tool(tool, arguments)
    if HTTP and mode == "legacy":
        await assert_back_channel(rec.http, tool, method)
    return r


async def test_sampling(conn):
    _, _, rec = conn
    rec.sampling.clear()
    r = await call_asking(conn, "test_sampling", {"prompt": "interop sampling prompt"}, "sampling/createMessage")
    assert not r.is_error
    assert len(rec.sampling) == 1
    msg = rec.sampling[0].messages[0]
    assert (msg.role, msg.content.text, rec.sampling[0].max_tokens) == ("user", "interop sampling prompt", 100)
    assert only_text(r) == f"LLM response: {ANSWERS['samplingAnswer']}"


async def test_elicitation(conn):
    _, _, rec = conn
    rec.elicitation.clear()
    r = await call_asking(conn, "test_elicitation", {"message": "interop elicitation message"}, "elicitation/create")
    assert not r.is_error
    assert len(rec.elicitation) == 1 and rec.elicitation[0].message == "interop elicitation message"
    text = only_text(r)
    assert text.startswith("User response: action=accept"), text
    assert ANSWERS["elicitString"] in text or ANSWERS["elicitName"] in text, text
    prefix = "User response: action=accept, content="
    assert json.loads(text[len(prefix):]) == fill_elicitation(rec.elicitation[0].requested_schema), text


async def test_input_required_result_elicitation(conn):
    mode, client, rec = conn  # legacy: the question arrives as a server-to-client request
    rec.elicitation.clear()
    r = await client.call_tool("test_input_required_result_elicitation")
    assert not r.is_error
    assert len(rec.elicitation) == 1 and rec.elicitation[0].message == "What is your name?"
    assert only_text(r) == f"Hello, {ANSWERS['elicitName']}!"


async def test_input_required_result_sampling(conn):
    mode, client, rec = conn  # legacy: the question arrives as a server-to-client request
    rec.sampling.clear()
    r = await client.call_tool("test_input_required_result_sampling")
    assert not r.is_error
    assert len(rec.sampling) == 1
    assert rec.sampling[0].messages[0].content.text == "What is the capital of France?"
    assert rec.sampling[0].max_tokens == 100
    assert ANSWERS["samplingAnswer"] in only_text(r)


async def wait_for(pred, what: str, seconds: float = 2.0) -> None:
    end = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.01)


def json_after(text: str, prefix: str) -> Any:
    assert text.startswith(prefix), text
    return json.loads(text[len(prefix):])


async def elicited_once(client: Client, rec: Recorder, tool: str) -> tuple[types.CallToolResult, Any]:
    """Calls `tool`, which must ask exactly one elicitation; returns its result and what it asked."""
    rec.elicitation.clear()
    r = await client.call_tool(tool)
    assert len(rec.elicitation) == 1
    return r, rec.elicitation[0]


def assert_elicitation_completed(r: types.CallToolResult, params: Any) -> None:
    """The tool answered with exactly the content the handler sent for `params`."""
    assert not r.is_error
    assert json_after(only_text(r), "Elicitation completed: action=accept, content=") == fill_elicitation(params.requested_schema)


async def test_json_schema_2020_12_tool(conn):
    _, client, _ = conn
    tools = {t.name: t for t in (await client.list_tools()).tools}
    s = tools["json_schema_2020_12_tool"].input_schema
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["$defs"] == {"address": {"$anchor": "addressDef", "type": "object",
                                      "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}}
    assert s["properties"]["address"] == {"$ref": "#/$defs/address"}
    assert s["properties"]["contactMethod"] == {"type": "string", "enum": ["phone", "email"]}
    assert s["allOf"] == [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}]
    assert s["if"] == {"properties": {"contactMethod": {"const": "phone"}}}
    assert (s["then"], s["else"]) == ({"required": ["phone"]}, {"required": ["email"]})
    assert s["additionalProperties"] is False
    r = await client.call_tool("json_schema_2020_12_tool", JSON_SCHEMA_ARGS)
    assert not r.is_error
    assert json_after(only_text(r), "Received: ") == JSON_SCHEMA_ARGS


async def test_elicitation_sep1034_defaults(conn):
    _, client, rec = conn
    r, params = await elicited_once(client, rec, "test_elicitation_sep1034_defaults")
    assert params.message == "Please review and update the form fields with defaults"
    p = params.requested_schema["properties"]
    assert sorted(p) == ["age", "name", "score", "status", "verified"]
    assert (p["name"]["type"], p["name"]["default"]) == ("string", "John Doe")
    assert (p["age"]["type"], p["age"]["default"]) == ("integer", 30)
    assert (p["score"]["type"], p["score"]["default"]) == ("number", 95.5)
    assert (p["status"]["enum"], p["status"]["default"]) == (["active", "inactive", "pending"], "active")
    assert (p["verified"]["type"], p["verified"]["default"]) == ("boolean", True)
    assert_elicitation_completed(r, params)


async def test_elicitation_sep1330_enums(conn):
    _, client, rec = conn
    r, params = await elicited_once(client, rec, "test_elicitation_sep1330_enums")
    assert params.message == "Please select options from the enum fields"
    p = params.requested_schema["properties"]
    assert sorted(p) == ["legacyEnum", "titledMulti", "titledSingle", "untitledMulti", "untitledSingle"]
    assert p["untitledSingle"]["enum"] == ["option1", "option2", "option3"]
    assert p["titledSingle"]["oneOf"] == [
        {"const": "value1", "title": "First Option"},
        {"const": "value2", "title": "Second Option"},
        {"const": "value3", "title": "Third Option"},
    ]
    assert (p["legacyEnum"]["enum"], p["legacyEnum"]["enumNames"]) == (
        ["opt1", "opt2", "opt3"], ["Option One", "Option Two", "Option Three"])
    assert p["untitledMulti"]["type"] == "array"
    assert p["untitledMulti"]["items"] == {"type": "string", "enum": ["option1", "option2", "option3"]}
    assert p["titledMulti"]["type"] == "array"
    assert p["titledMulti"]["items"] == {"anyOf": [
        {"const": "value1", "title": "First Choice"},
        {"const": "value2", "title": "Second Choice"},
        {"const": "value3", "title": "Third Choice"},
    ]}
    assert_elicitation_completed(r, params)


async def test_reconnection(conn):
    """stdio and 2026-07-28: just answers. Streamable HTTP at 2025-11-25: answered only after the client resumes
    the closed POST stream with GET + Last-Event-ID (asserted on the recorded HTTP traffic)."""
    mode, client, rec = conn
    from_ = len(rec.http)
    assert only_text(await client.call_tool("test_reconnection")) == "Reconnection test completed"
    if HTTP and mode == "legacy":
        _, get, priming = await assert_resumed(rec.http[from_:], "test_reconnection")
        print(f"resumed: priming id {priming['id']} retry {priming['retry']}; GET Last-Event-ID {get.headers['last-event-id']}")


async def test_x_mcp_header(conn):
    _, client, _ = conn
    assert only_text(await client.call_tool("test_x_mcp_header", {"region": "eu-west"})) == "Region: eu-west"


async def test_missing_capability_declared(conn):
    _, client, _ = conn  # legacy: initialize capabilities; 2026: _meta clientCapabilities
    assert only_text(await client.call_tool("test_missing_capability")) == "The client declared sampling."


async def test_missing_capability_undeclared(conn):
    mode, _, _ = conn
    async with make_client(mode, Recorder(), sampling_cb=False) as other:
        with pytest.raises(MCPError) as err:
            await other.call_tool("test_missing_capability")
    assert err.value.code == -32021, err.value
    assert (err.value.data or {}).get("requiredCapabilities") == {"sampling": {}}, err.value.data


async def test_logging_tool(conn):
    mode, client, rec = conn
    if mode == "legacy":
        await client.set_logging_level("debug")
    else:
        rec.logs.clear()
        assert only_text(await client.call_tool("test_logging_tool")) == "Logging tool completed"
        await anyio.sleep(0.05)
        assert rec.logs == [], "2026: no notifications/message without _meta logLevel"
    rec.logs.clear()
    meta = None if mode == "legacy" else {LOG_LEVEL_META: "info"}
    assert only_text(await client.call_tool("test_logging_tool", meta=meta)) == "Logging tool completed"
    await wait_for(lambda: len(rec.logs) >= 1, "notifications/message")
    assert [(entry.level, entry.data) for entry in rec.logs] == [("info", "Logging tool executed")]


async def test_streaming_elicitation(conn):
    mode, client, rec = conn
    events: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((progress, total, message))

    if mode == "legacy":
        await client.set_logging_level("debug")
    rec.logs.clear()
    rec.sampling.clear()
    rec.elicitation.clear()
    meta = None if mode == "legacy" else {LOG_LEVEL_META: "info"}
    r = await client.call_tool("test_streaming_elicitation", progress_callback=on_progress, meta=meta)
    assert only_text(r) == "Streaming completed"
    assert events == [(0, 100, "streaming"), (50, 100, "streaming"), (100, 100, "streaming")]
    await wait_for(lambda: len(rec.logs) >= 3, "three notifications/message")
    assert [entry.data for entry in rec.logs] == ["step 0", "step 50", "step 100"]
    assert (rec.sampling, rec.elicitation) == ([], []), "only notifications, never a request"


@pytest.mark.parametrize(
    "tool,kind,text",
    [
        ("test_trigger_tool_change", "tools", "Tool list change triggered"),
        ("test_trigger_prompt_change", "prompts", "Prompt list change triggered"),
    ],
)
async def test_trigger_list_change(conn, tool, kind, text):
    mode, client, rec = conn
    method = f"notifications/{kind}/list_changed"
    if mode == "legacy":
        rec.notifications.clear()
        assert only_text(await client.call_tool(tool)) == text
        await wait_for(lambda: method in rec.notifications, method)
        return
    flags = {"tools_list_changed": kind == "tools", "prompts_list_changed": kind == "prompts"}
    async with client.listen(**flags) as sub:
        assert only_text(await client.call_tool(tool)) == text
        with anyio.fail_after(2):
            event = await sub.__anext__()
    assert type(event).__name__ == ("ToolsListChanged" if kind == "tools" else "PromptsListChanged"), event


async def test_input_required_result_list_roots(conn):
    _, client, rec = conn
    rec.roots.clear()
    r = await client.call_tool("test_input_required_result_list_roots")
    assert len(rec.roots) == 1
    assert json_after(only_text(r), "Client roots: ") == ROOTS


async def test_input_required_result_request_state(conn):
    _, client, rec = conn
    rec.elicitation.clear()
    r = await client.call_tool("test_input_required_result_request_state")
    assert len(rec.elicitation) == 1 and rec.elicitation[0].message == "Please confirm"
    text = only_text(r)
    assert "state-ok" in text, text
    assert text == 'state-ok: confirmed={"ok":true}'


async def test_input_required_result_multiple_inputs(conn):
    _, client, rec = conn
    rec.elicitation.clear(); rec.sampling.clear(); rec.roots.clear()
    r = await client.call_tool("test_input_required_result_multiple_inputs")
    assert (len(rec.elicitation), len(rec.sampling), len(rec.roots)) == (1, 1, 1)
    assert rec.sampling[0].max_tokens == 50
    assert only_text(r) == f"Hello, {ANSWERS['elicitName']}! Model: {ANSWERS['samplingAnswer']}. Roots received."


async def test_input_required_result_multi_round(conn):
    _, client, rec = conn
    rec.elicitation.clear()
    r = await client.call_tool("test_input_required_result_multi_round")
    assert [e.message for e in rec.elicitation] == ["Step 1: What is your name?", "Step 2: What is your favorite color?"]
    assert only_text(r) == f"Hello, {ANSWERS['elicitName']}! Your favorite color is {ANSWERS['elicitString']}."


async def test_interview(conn):
    """Two questions asked in turn, progress reported around them: each its own elicitation
    (a server-to-client request in a legacy session, an input_required round at 2026-07-28)."""
    _, client, rec = conn
    rec.elicitation.clear()
    r = await client.call_tool("interview")
    assert [e.message for e in rec.elicitation] == ["Who are you?", "What do you do?"]
    assert only_text(r) == f"Interviewed {ANSWERS['elicitName']}, {ANSWERS['elicitString']}"


async def test_input_required_result_tampered_state(conn):
    mode, client, rec = conn
    r = await client.call_tool("test_input_required_result_tampered_state")
    assert only_text(r) == f"Verified state; hello, {ANSWERS['elicitName']}!"
    if mode == "legacy":
        return  # no requestState on the legacy wire: nothing to tamper with
    first = await client.session.call_tool("test_input_required_result_tampered_state", allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult), first
    assert first.request_state
    (key,) = first.input_requests
    responses = {key: types.ElicitResult(action="accept", content={"name": ANSWERS["elicitName"]})}
    st = first.request_state
    tampered = st[:-1] + ("B" if st[-1] == "A" else "A")
    with pytest.raises(MCPError) as err:
        await client.session.call_tool(
            "test_input_required_result_tampered_state", input_responses=responses, request_state=tampered,
            allow_input_required=True,
        )
    assert err.value.code == -32602, err.value


async def test_input_required_result_capabilities(conn):
    _, client, rec = conn
    rec.elicitation.clear(); rec.sampling.clear()
    r = await client.call_tool("test_input_required_result_capabilities")
    assert (len(rec.elicitation), len(rec.sampling)) == (1, 0)
    assert only_text(r) == f"Hello, {ANSWERS['elicitName']}!"


# ----------------------------------------------------------------------------------------- resources


async def test_resources_list(conn):
    _, client, _ = conn
    resources = (await client.list_resources()).resources
    uris = [str(r.uri) for r in resources]
    for uri in FIXTURE["resources"]:
        assert uri in uris, uris
    assert all(r.name for r in resources)
    templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
    for t in FIXTURE["resourceTemplates"]:
        assert t in templates, templates


async def test_read_static_text(conn):
    _, client, _ = conn
    c = only_content(await client.read_resource("test://static-text"))
    assert (str(c.uri), c.mime_type, c.text) == ("test://static-text", "text/plain", TEXTS["staticText"])


async def test_read_static_binary(conn):
    _, client, _ = conn
    c = only_content(await client.read_resource("test://static-binary"))
    assert (str(c.uri), c.mime_type, c.blob) == ("test://static-binary", "image/png", FIXTURE["png"])


async def test_read_template(conn):
    _, client, _ = conn
    c = only_content(await client.read_resource("test://template/123/data"))
    assert (str(c.uri), c.mime_type) == ("test://template/123/data", "application/json")
    assert json.loads(c.text) == json.loads(TEXTS["template123"])


# ----------------------------------------------------------------------------------------- prompts


async def test_prompts_list(conn):
    mode, client, _ = conn
    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    for name in FIXTURE["prompts"][era(mode)]:
        assert name in prompts, list(prompts)
    assert all(p.description for p in prompts.values())
    args = {a.name: a for a in prompts["test_prompt_with_arguments"].arguments or []}
    assert args["arg1"].required and args["arg2"].required


async def test_get_simple_prompt(conn):
    _, client, _ = conn
    r = await client.get_prompt("test_simple_prompt")
    assert [(m.role, m.content.type, m.content.text) for m in r.messages] == [("user", "text", TEXTS["simplePrompt"])]


async def test_get_prompt_with_arguments(conn):
    _, client, _ = conn
    r = await client.get_prompt("test_prompt_with_arguments", {"arg1": "testValue1", "arg2": "testValue2"})
    assert [(m.role, m.content.type, m.content.text) for m in r.messages] == [("user", "text", TEXTS["promptWithArgs"])]


async def test_completion(conn):
    _, client, _ = conn
    r = await client.complete(
        types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"), {"name": "arg1", "value": "test"}
    )
    assert isinstance(r.completion.values, list)
    assert all(isinstance(v, str) for v in r.completion.values)


async def test_get_prompt_with_embedded_resource(conn):
    _, client, _ = conn
    r = await client.get_prompt("test_prompt_with_embedded_resource", {"resourceUri": "test://example-resource"})
    assert [m.content.type for m in r.messages] == ["resource", "text"]
    res = r.messages[0].content.resource
    assert (str(res.uri), res.mime_type, res.text) == ("test://example-resource", "text/plain", "Embedded resource content for testing.")
    assert r.messages[1].content.text == "Please process the embedded resource above."


async def test_get_prompt_with_image(conn):
    _, client, _ = conn
    r = await client.get_prompt("test_prompt_with_image")
    assert [m.content.type for m in r.messages] == ["image", "text"]
    assert (r.messages[0].content.mime_type, r.messages[0].content.data) == ("image/png", FIXTURE["png"])
    assert r.messages[1].content.text == "Please analyze the image above."


async def test_get_input_required_result_prompt(conn):
    _, client, rec = conn  # legacy: an elicitation/create request; 2026: MRTR through prompts/get
    rec.elicitation.clear()
    r = await client.get_prompt("test_input_required_result_prompt")
    assert len(rec.elicitation) == 1 and rec.elicitation[0].message == "What context should the prompt use?"
    assert [(m.role, m.content.type, m.content.text) for m in r.messages] == [
        ("user", "text", f"Prompt with user context: {ANSWERS['elicitString']}")]


# ----------------------------------------------------------------------------------------- tasks
# The fixture's task tools, called as any tool is (both eras), then run as tasks through the
# SDK's own extension API (2026-07-28; tasks_extension.py).

async def test_task_tools_called_as_any_tool(conn):
    mode, client, _ = conn
    assert only_text(await client.call_tool("greet", {"name": "py"})) == "Hello, py!"
    assert only_text(await client.call_tool("slow_compute", {"seconds": 0.1, "label": "py"})) == "py: done after 0.1 s"
    assert only_text(await client.call_tool("confirm_delete", {"filename": "a.txt"})) == "Deleted a.txt."
    name = ANSWERS["elicitName"]
    assert only_text(await client.call_tool("multi_input", {})) == f"Got {name} and {name}."
    with pytest.raises(MCPError) as broke:
        await client.call_tool("protocol_error_job", {})
    assert broke.value.error.code == -32603
    # Tools that only run as tasks: -32601 without `task` at 2025-11-25, -32021 without the
    # extension at 2026-07-28.
    for tool in ("failing_job", "test_tool_with_task"):
        with pytest.raises(MCPError) as refused:
            await client.call_tool(tool, {})
        assert refused.value.error.code == (-32021 if mode == MODERN else -32601), refused.value.error


async def test_tasks_run_through_the_sdks_extension_api():
    """2026-07-28: the client declares the extension, the server answers with tasks, and the
    SDK's claim resolver polls each to its end, answering the questions a task parks on."""
    rec = Recorder()
    tasks = Tasks(fill_elicitation)
    client = make_client(MODERN, rec, extensions=[tasks])
    async with client:
        assert only_text(await client.call_tool("slow_compute", {"seconds": 0.2, "label": "task"})) == "task: done after 0.2 s"
        assert only_text(await client.call_tool("confirm_delete", {"filename": "b.txt"})) == "Deleted b.txt."
        assert tasks.answered == ["confirm"], tasks.answered
        failed = await client.call_tool("failing_job", {})
        assert failed.is_error and only_text(failed) == "the job failed"
        # Asks in the request first (an input round the SDK answers), then continues as a task.
        greeted = await client.call_tool("test_tool_with_task", {})
        assert only_text(greeted) == f"Hello, {ANSWERS['elicitName']}, from a task."
        # greet never runs as a task, extension or not.
        assert only_text(await client.call_tool("greet", {"name": "task"})) == "Hello, task!"
    assert len(tasks.created) == 4, tasks.created


async def test_tools_beyond_the_conformance_fixture(conn):
    """`droid serve`'s own tools: the benchmark pair, a destructive one and a slow one."""
    _, client, _ = conn
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("echo", "add", "delete_note", "sleep"):
        if name not in tools:
            pytest.skip(f"the server under test has no {name} tool")
    assert only_text(await client.call_tool("echo", {"text": "héllo"})) == "héllo"
    assert only_text(await client.call_tool("add", {"a": 2, "b": 3.5})) == "5.5"
    annotations = tools["delete_note"].annotations
    assert annotations is not None and annotations.destructive_hint is True
    assert only_text(await client.call_tool("delete_note", {"id": "7"})) == "Deleted note 7."
    assert only_text(await client.call_tool("sleep", {"ms": 1})) == "Slept 1 ms."


async def test_every_listed_tool_was_called(conn):
    """Runs last for each mode (module-scoped parametrized fixture): every tool tools/list returned was called."""
    mode, client, rec = conn
    listed = [t.name for t in (await client.list_tools()).tools]
    missing = [n for n in listed if n not in rec.called]
    assert not missing, f"tools listed but never called: {missing}"


# ----------------------------------------------------------------------------------------- mode="auto"


async def test_auto_mode_negotiates_modern():
    """The SDK default: server/discover first on the same process; a dual-era server must answer it."""
    async with make_client("auto", Recorder()) as client:
        assert client.protocol_version == MODERN
        assert only_text(await client.call_tool("test_simple_text")) == TEXTS["simple"]
