"""Python SDK (`mcp` 2.3.0) `mcp.Client` driving `droid serve` over stdio, in both eras.

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
import re
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

FIXTURE = json.loads((Path(__file__).resolve().parent.parent / "fixture.json").read_text())
TEXTS = FIXTURE["texts"]
ANSWERS = FIXTURE["client"]
MODERN = "2026-07-28"
MODES = ["legacy", MODERN]

pytestmark = pytest.mark.anyio
warnings.filterwarnings("ignore", category=DeprecationWarning)


def server_params() -> StdioServerParameters:
    raw = os.environ.get("DROID_SERVER_CMD", "").split()
    if not raw:
        raise RuntimeError('DROID_SERVER_CMD is not set (e.g. "/work/main/target/debug/droid serve")')
    return StdioServerParameters(command=raw[0], args=raw[1:], env=dict(os.environ))


def fill_elicitation(schema: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        if prop.get("enum"):
            content[key] = prop["enum"][0]
        elif prop.get("type") == "string":
            content[key] = ANSWERS["elicitName"] if key == "name" else ANSWERS["elicitString"]
        elif prop.get("type") in ("integer", "number"):
            content[key] = 42
        elif prop.get("type") == "boolean":
            content[key] = True
    return content


@dataclass
class Recorder:
    sampling: list[types.CreateMessageRequestParams] = field(default_factory=list)
    elicitation: list[Any] = field(default_factory=list)
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)


def make_client(mode: str, rec: Recorder) -> Client:
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

    async def logging(params: types.LoggingMessageNotificationParams):
        rec.logs.append(params)

    return Client(
        server_params(),
        mode=mode,
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        logging_callback=logging,
        client_info=types.Implementation(name="droid-interop-python", version="2.3.0"),
        read_timeout_seconds=30,
    )


@pytest.fixture(scope="module", params=MODES)
async def conn(request):
    rec = Recorder()
    async with make_client(request.param, rec) as client:
        yield request.param, client, rec


def era(mode: str) -> str:
    return "modern" if mode == MODERN else "legacy"


def only_text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result.content
    assert result.content[0].type == "text", result.content[0]
    return result.content[0].text


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
    r = await client.call_tool("test_image_content")
    assert not r.is_error and len(r.content) == 1
    c = r.content[0]
    assert (c.type, c.mime_type, c.data) == ("image", "image/png", FIXTURE["png"])


async def test_audio_content(conn):
    _, client, _ = conn
    r = await client.call_tool("test_audio_content")
    assert not r.is_error and len(r.content) == 1
    c = r.content[0]
    assert (c.type, c.mime_type, c.data) == ("audio", "audio/wav", FIXTURE["wav"])


async def test_embedded_resource(conn):
    _, client, _ = conn
    r = await client.call_tool("test_embedded_resource")
    assert not r.is_error and len(r.content) == 1
    c = r.content[0]
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
    assert not r.is_error
    assert len(events) >= 3, events
    assert all(b[0] >= a[0] for a, b in zip(events, events[1:])), events
    assert events[:3] == [(0, 100), (50, 100), (100, 100)]


async def test_tool_with_logging(conn):
    mode, client, rec = conn
    if mode != "legacy":
        pytest.skip("legacy-era check (2026 logging is per-request _meta opt-in)")
    await client.set_logging_level("debug")
    rec.logs.clear()
    r = await client.call_tool("test_tool_with_logging")
    assert not r.is_error
    info = [entry.data for entry in rec.logs if entry.level == "info"]
    assert info[:3] == TEXTS["logMessages"], rec.logs


async def test_sampling(conn):
    mode, client, rec = conn
    if mode != "legacy":
        pytest.skip("server-to-client sampling requests exist only in the legacy era")
    rec.sampling.clear()
    r = await client.call_tool("test_sampling", {"prompt": "interop sampling prompt"})
    assert not r.is_error
    assert len(rec.sampling) == 1
    msg = rec.sampling[0].messages[0]
    assert (msg.role, msg.content.text, rec.sampling[0].max_tokens) == ("user", "interop sampling prompt", 100)
    assert only_text(r) == f"LLM response: {ANSWERS['samplingAnswer']}"


async def test_elicitation(conn):
    mode, client, rec = conn
    if mode != "legacy":
        pytest.skip("server-to-client elicitation requests exist only in the legacy era")
    rec.elicitation.clear()
    r = await client.call_tool("test_elicitation", {"message": "interop elicitation message"})
    assert not r.is_error
    assert len(rec.elicitation) == 1 and rec.elicitation[0].message == "interop elicitation message"
    text = only_text(r)
    assert text.startswith("User response: action=accept"), text
    assert ANSWERS["elicitString"] in text or ANSWERS["elicitName"] in text, text


async def test_input_required_result_elicitation(conn):
    mode, client, rec = conn
    if mode == "legacy":
        pytest.skip("InputRequiredResult is a 2026-07-28 feature")
    rec.elicitation.clear()
    r = await client.call_tool("test_input_required_result_elicitation")
    assert not r.is_error
    assert len(rec.elicitation) == 1 and rec.elicitation[0].message == "What is your name?"
    assert only_text(r) == f"Hello, {ANSWERS['elicitName']}!"


async def test_input_required_result_sampling(conn):
    mode, client, rec = conn
    if mode == "legacy":
        pytest.skip("InputRequiredResult is a 2026-07-28 feature")
    rec.sampling.clear()
    r = await client.call_tool("test_input_required_result_sampling")
    assert not r.is_error
    assert len(rec.sampling) == 1
    assert rec.sampling[0].messages[0].content.text == "What is the capital of France?"
    assert rec.sampling[0].max_tokens == 100
    assert ANSWERS["samplingAnswer"] in only_text(r)


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
    r = await client.read_resource("test://static-text")
    assert len(r.contents) == 1
    c = r.contents[0]
    assert (str(c.uri), c.mime_type, c.text) == ("test://static-text", "text/plain", TEXTS["staticText"])


async def test_read_static_binary(conn):
    _, client, _ = conn
    r = await client.read_resource("test://static-binary")
    assert len(r.contents) == 1
    c = r.contents[0]
    assert (str(c.uri), c.mime_type, c.blob) == ("test://static-binary", "image/png", FIXTURE["png"])


async def test_read_template(conn):
    _, client, _ = conn
    r = await client.read_resource("test://template/123/data")
    assert len(r.contents) == 1
    c = r.contents[0]
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


# ----------------------------------------------------------------------------------------- mode="auto"


async def test_auto_mode_negotiates_modern():
    """The SDK default: server/discover first on the same process; a dual-era server must answer it."""
    async with make_client("auto", Recorder()) as client:
        assert client.protocol_version == MODERN
        assert only_text(await client.call_tool("test_simple_text")) == TEXTS["simple"]
