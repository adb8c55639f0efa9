#!/usr/bin/env python3
"""Reference conformance-fixture server for the interop harness, built on the Python SDK (mcp 2.3.0).

It exists only to prove the client drivers before `droid serve` works:

    DROID_SERVER_CMD="tests/interop/.venv/bin/python tests/interop/reference_server.py" tests/interop/run.sh

Serves the fixture of shared/CONFORMANCE.md section 5 over stdio. The SDK's stdio loop is dual-era: the
client's first request decides between the legacy `initialize` handshake and the stateless 2026-07-28
per-request `_meta` envelope. Texts follow CONFORMANCE.md exactly (compact JSON, the exact
`test_error_handling` text) rather than the SDK's own everything-server where the two differ.

Every tool that asks the client something works in both eras, so the fixture can stand behind
`droid bridge` at either revision: in a legacy session it asks with server-to-client requests (sent
together when a 2026-07-28 round would carry them together, each naming in `_meta` the input key the
2026-07-28 round uses), and in a 2026-07-28 request it answers with an InputRequiredResult.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    CallToolResult,
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequest,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


mcp = MCPServer(name="mcp-conformance-test-server", version="0.1.0")

# ----------------------------------------------------------------------------- tools, both eras


@mcp.tool()
def test_simple_text() -> str:
    """Tests simple text content response"""
    return "This is a simple text response for testing."


@mcp.tool()
def add(a: float, b: float) -> str:
    """Adds two numbers (not part of the conformance fixture: the client interop tests call it)."""
    total = a + b
    return str(int(total)) if total == int(total) else str(total)


@mcp.tool()
def test_image_content() -> list[ImageContent]:
    """Tests image content response"""
    return [ImageContent(type="image", data=PNG, mime_type="image/png")]


@mcp.tool()
def test_audio_content() -> list[AudioContent]:
    """Tests audio content response"""
    return [AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


@mcp.tool()
def test_embedded_resource() -> list[EmbeddedResource]:
    """Tests embedded resource content response"""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
            ),
        )
    ]


@mcp.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Tests response with multiple content types (text, image, resource)"""
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://mixed-content-resource",
                mime_type="application/json",
                text=compact({"test": "data", "value": 123}),
            ),
        ),
    ]


@mcp.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Tests tool that emits log messages during execution"""
    await ctx.info("Tool execution started")
    await asyncio.sleep(0.05)
    await ctx.info("Tool processing data")
    await asyncio.sleep(0.05)
    await ctx.info("Tool execution completed")
    return "Tool with logging executed successfully"


@mcp.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Tests tool that reports progress notifications"""
    for step in (0, 50, 100):
        await ctx.report_progress(progress=step, total=100, message=f"Completed step {step} of 100")
        if step != 100:
            await asyncio.sleep(0.05)
    return "Tool with progress executed successfully"


@mcp.tool()
def test_error_handling() -> CallToolResult:
    """Tests error response handling"""
    return CallToolResult(
        is_error=True, content=[TextContent(type="text", text="This tool intentionally returns an error for testing")]
    )


@mcp.tool()
async def test_sampling(prompt: str, ctx: Context) -> str | InputRequiredResult:
    """Tests server-initiated sampling (LLM completion request)"""
    question = _sample(prompt, 100)
    if _modern(ctx):
        answer = (ctx.input_responses or {}).get("sampling")
        if answer is None:
            return InputRequiredResult(input_requests={"sampling": question})
    else:
        answer = (await _ask_legacy(ctx, {"sampling": question}))["sampling"]
    text = answer.content.text if isinstance(answer, CreateMessageResult) and answer.content.type == "text" else "No response"
    return f"LLM response: {text}"


@mcp.tool()
async def test_elicitation(message: str, ctx: Context) -> str | InputRequiredResult:
    """Tests server-initiated elicitation (user input request)"""
    question = _form(
        message, {"type": "object", "properties": {"response": {"type": "string", "description": "User's response"}}, "required": ["response"]}
    )
    answer = await _one(ctx, "elicitation", question)
    if isinstance(answer, InputRequiredResult):
        return answer
    return f"User response: action={answer.action}, content={compact(answer.content or {})}"


async def _one(ctx: Context, key: str, question: InputRequest) -> Any:
    """The answer to one question, or, in a 2026-07-28 request without it, the round asking it."""
    if _modern(ctx):
        answer = (ctx.input_responses or {}).get(key)
        return answer if answer is not None else InputRequiredResult(input_requests={key: question})
    return (await _ask_legacy(ctx, {key: question}))[key]


SEP1034_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}

SEP1330_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "description": "Pick one", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "description": "Pick one",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "description": "Pick one",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Pick some",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Pick some",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


@mcp.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str | InputRequiredResult:
    """Tests elicitation with default values for all primitive types (SEP-1034)"""
    answer = await _one(ctx, "defaults", _form("Please provide user information", SEP1034_SCHEMA))
    if isinstance(answer, InputRequiredResult):
        return answer
    return f"Elicitation result: action={answer.action}, content={compact(answer.content or {})}"


@mcp.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str | InputRequiredResult:
    """Tests elicitation with enum schema variations (SEP-1330)"""
    answer = await _one(ctx, "enums", _form("Please select options from the enum fields", SEP1330_SCHEMA))
    if isinstance(answer, InputRequiredResult):
        return answer
    return f"Elicitation completed: action={answer.action}, content={compact(answer.content or {})}"


@mcp.tool()
def test_reconnection() -> str:
    """Tests SSE polling (Streamable HTTP only; a plain answer on stdio)"""
    return "Reconnection test completed"


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@mcp.tool(name="json_schema_2020_12_tool")
def json_schema_2020_12_tool() -> str:
    """Tests JSON Schema 2020-12 keyword preservation in tools/list"""
    return "json_schema_2020_12_tool"


# The decorator derives the schema from the signature; this tool's point is the schema itself.
mcp._tool_manager.get_tool("json_schema_2020_12_tool").parameters = JSON_SCHEMA_2020_12  # noqa: SLF001


# ----------------------------------------------------------------------------- tools, 2026-07-28


@mcp.tool()
async def test_missing_capability(ctx: Context) -> str:
    """Requires the client 'sampling' capability (-32021 otherwise)"""
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool requires the client 'sampling' capability",
            data={"requiredCapabilities": {"sampling": {}}},
        )
    return "Client declared sampling capability; proceeding."


@mcp.tool()
async def test_streaming_elicitation(ctx: Context) -> str:
    """Streams notifications only, then the result"""
    await ctx.report_progress(progress=1, total=2)
    return "streamed"


@mcp.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Logs only when the request _meta opts in with a logLevel"""
    await ctx.info("logging tool message")
    return "logged"


@mcp.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Announces notifications/tools/list_changed to subscriptions/listen streams"""
    await ctx.notify_tools_changed()
    return "tool list changed"


@mcp.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Announces notifications/prompts/list_changed to subscriptions/listen streams"""
    await ctx.notify_prompts_changed()
    return "prompt list changed"


# The `_meta` key under which a legacy server-to-client request names the input key the same
# question has in a 2026-07-28 round (what protocol-droid's own servers do too).
INPUT_KEY_META = "protocol-droid/inputKey"

_ANSWER_TYPES = {
    "elicitation/create": ElicitResult,
    "sampling/createMessage": CreateMessageResult,
    "roots/list": ListRootsResult,
}


def _modern(ctx: Context) -> bool:
    return ctx.protocol_version == "2026-07-28"


async def _ask_inline(ctx: Context, key: str, request: InputRequest) -> object:
    """One question as a legacy server-to-client request, naming its 2026-07-28 input key."""
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    data.setdefault("params", {}).setdefault("_meta", {})[INPUT_KEY_META] = key
    typed = type(request).model_validate(data)
    return await ctx.session.send_request(
        typed, _ANSWER_TYPES[data["method"]], metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
    )


async def _ask_legacy(ctx: Context, requests: dict[str, InputRequest]) -> dict[str, object]:
    """A round of questions in the legacy era: sent together, answered in any order."""
    keys = list(requests)
    answers = await asyncio.gather(*(_ask_inline(ctx, key, requests[key]) for key in keys))
    return dict(zip(keys, answers))


def _form(message: str, schema: dict[str, Any]) -> ElicitRequest:
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def _elicit(message: str, field: str) -> ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def _sample(text: str, max_tokens: int) -> CreateMessageRequest:
    return CreateMessageRequest(
        params=CreateMessageRequestParams(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=text))], max_tokens=max_tokens
        )
    )


def _elicited(answer: object, field: str) -> str | None:
    if isinstance(answer, ElicitResult) and answer.content:
        value = answer.content.get(field)
        return value if isinstance(value, str) else None
    return None


@mcp.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
    """MRTR: one elicitation (user_name), then a greeting"""
    if not _modern(ctx):
        answers = await _ask_legacy(ctx, {"user_name": _elicit("What is your name?", "name")})
        return f"Hello, {_elicited(answers['user_name'], 'name') or 'stranger'}!"
    responses = ctx.input_responses or {}
    if "user_name" in responses:
        return f"Hello, {_elicited(responses['user_name'], 'name') or 'stranger'}!"
    return InputRequiredResult(input_requests={"user_name": _elicit("What is your name?", "name")})


@mcp.tool()
async def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
    """MRTR: one sampling request (capital_question), then echoes the sampled text"""
    responses = ctx.input_responses or {}
    if not _modern(ctx):
        responses = await _ask_legacy(ctx, {"capital_question": _sample("What is the capital of France?", 100)})
    if "capital_question" in responses:
        answer = responses["capital_question"]
        text = answer.content.text if isinstance(answer, CreateMessageResult) and answer.content.type == "text" else "?"
        return f"Model said: {text}"
    return InputRequiredResult(input_requests={"capital_question": _sample("What is the capital of France?", 100)})


@mcp.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
    """MRTR: roots/list (client_roots)"""
    responses = ctx.input_responses or {}
    if not _modern(ctx):
        responses = await _ask_legacy(ctx, {"client_roots": ListRootsRequest()})
    if "client_roots" in responses:
        answer = responses["client_roots"]
        return f"Client exposed {len(answer.roots) if isinstance(answer, ListRootsResult) else 0} root(s)."
    return InputRequiredResult(input_requests={"client_roots": ListRootsRequest()})


@mcp.tool()
async def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
    """MRTR with an opaque requestState"""
    if not _modern(ctx):
        await _ask_legacy(ctx, {"confirm": _elicit("Please confirm", "ok")})
        return "state-ok: confirmation received"
    if "confirm" in (ctx.input_responses or {}) and ctx.request_state == "request-state-nonce":
        return "state-ok: confirmation received"
    return InputRequiredResult(input_requests={"confirm": _elicit("Please confirm", "ok")}, request_state="request-state-nonce")


@mcp.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequiredResult:
    """MRTR: elicitation, sampling and roots in one round"""
    if not _modern(ctx):
        await _ask_legacy(
            ctx,
            {
                "user_name": _elicit("What is your name?", "name"),
                "greeting": _sample("Generate a greeting", 50),
                "client_roots": ListRootsRequest(),
            },
        )
        return "All inputs received."
    if {"user_name", "greeting", "client_roots"} <= (ctx.input_responses or {}).keys():
        return "All inputs received."
    requests: dict[str, InputRequest] = {
        "user_name": _elicit("What is your name?", "name"),
        "greeting": _sample("Generate a greeting", 50),
        "client_roots": ListRootsRequest(),
    }
    return InputRequiredResult(input_requests=requests, request_state="multiple-inputs")


@mcp.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
    """MRTR over two rounds with an evolving requestState"""
    if not _modern(ctx):
        first = await _ask_legacy(ctx, {"step1": _elicit("Step 1: What is your name?", "name")})
        second = await _ask_legacy(ctx, {"step2": _elicit("Step 2: What is your favorite color?", "color")})
        return f"{_elicited(first['step1'], 'name')} likes {_elicited(second['step2'], 'color')}."
    state = json.loads(ctx.request_state) if ctx.request_state else {"round": 0}
    responses = ctx.input_responses or {}
    if state["round"] == 1 and "step1" in responses:
        name = _elicited(responses["step1"], "name")
        return InputRequiredResult(
            input_requests={"step2": _elicit("Step 2: What is your favorite color?", "color")},
            request_state=json.dumps({"round": 2, "name": name}),
        )
    if state["round"] == 2 and "step2" in responses:
        return f"{state.get('name')} likes {_elicited(responses['step2'], 'color')}."
    return InputRequiredResult(
        input_requests={"step1": _elicit("Step 1: What is your name?", "name")}, request_state=json.dumps({"round": 1})
    )


@mcp.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
    """MRTR with an integrity-protected requestState"""
    if not _modern(ctx):
        await _ask_legacy(ctx, {"confirm": _elicit("Please confirm", "ok")})
        return "state-ok: round-1"
    if ctx.request_state is None:
        return InputRequiredResult(input_requests={"confirm": _elicit("Please confirm", "ok")}, request_state="round-1")
    return f"state-ok: {ctx.request_state}"


@mcp.tool()
async def test_input_required_result_capabilities(ctx: Context) -> str | InputRequiredResult:
    """MRTR limited to the capabilities the client declared"""
    if ctx.input_responses:
        return "capabilities ok"
    caps = ctx.client_capabilities
    requests: dict[str, InputRequest] = {}
    if caps is not None and caps.sampling is not None:
        requests["sample"] = _sample("Say hello", 50)
    if caps is not None and caps.elicitation is not None:
        requests["ask"] = _elicit("What is your name?", "name")
    if not requests:
        return "no declared capabilities"
    if not _modern(ctx):
        await _ask_legacy(ctx, requests)
        return "capabilities ok"
    return InputRequiredResult(input_requests=requests, request_state="capability-gated")


# ----------------------------------------------------------------------------- resources


@mcp.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource for testing"""
    return "This is the content of the static text resource."


@mcp.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource (image) for testing"""
    return base64.b64decode(PNG)


@mcp.resource("test://template/{id}/data", mime_type="application/json")
def template(id: str) -> str:
    """A resource template with parameter substitution"""
    return compact({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@mcp.resource("test://watched-resource", mime_type="text/plain")
def watched() -> str:
    """A resource that can be subscribed to"""
    return "Watched resource content"


# ----------------------------------------------------------------------------- prompts


@mcp.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A simple prompt without arguments"""
    return [UserMessage(role="user", content=TextContent(type="text", text="This is a simple prompt for testing."))]


@mcp.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with required arguments"""
    text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    return [UserMessage(role="user", content=TextContent(type="text", text=text))]


@mcp.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt that includes an embedded resource"""
    resource = TextResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    return [
        UserMessage(role="user", content=EmbeddedResource(type="resource", resource=resource)),
        UserMessage(role="user", content=TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@mcp.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt that includes image content"""
    return [
        UserMessage(role="user", content=ImageContent(type="image", data=PNG, mime_type="image/png")),
        UserMessage(role="user", content=TextContent(type="text", text="Please analyze the image above.")),
    ]


@mcp.prompt()
async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
    """MRTR through prompts/get (user_context)"""
    responses = ctx.input_responses or {}
    if not _modern(ctx):
        responses = await _ask_legacy(ctx, {"user_context": _elicit("What context should the prompt use?", "context")})
    if "user_context" in responses:
        text = _elicited(responses["user_context"], "context") or "?"
        return [UserMessage(role="user", content=TextContent(type="text", text=f"Use the following context: {text}"))]
    return InputRequiredResult(input_requests={"user_context": _elicit("What context should the prompt use?", "context")})


# ----------------------------------------------------------------------------- other handlers


async def _set_level(ctx: ServerRequestContext, params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


async def _subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
    return EmptyResult()


async def _unsubscribe(ctx: ServerRequestContext, params: UnsubscribeRequestParams) -> EmptyResult:
    return EmptyResult()


mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)  # noqa: SLF001
mcp._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)  # noqa: SLF001
mcp._lowlevel_server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, _unsubscribe)  # noqa: SLF001


@mcp.completion()
async def _complete(
    ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument, context: CompletionContext | None
) -> Completion:
    if isinstance(ref, PromptReference) and ref.name == "test_prompt_with_arguments" and argument.name == "arg1":
        values = [v for v in ("paris", "park", "party") if v.startswith(argument.value)]
        return Completion(values=values, total=len(values), has_more=False)
    return Completion(values=[], total=0, has_more=False)


if __name__ == "__main__":
    # reference_server.py                 stdio (the default)
    # reference_server.py http PORT       Streamable HTTP at http://127.0.0.1:PORT/mcp
    # reference_server.py sse PORT        2024-11-05 HTTP+SSE at http://127.0.0.1:PORT/sse
    args = sys.argv[1:]
    if args and args[0] in ("http", "sse"):
        port = int(args[1])
        transport = "streamable-http" if args[0] == "http" else "sse"
        print(f"reference_server: serving the conformance fixture over {transport} on 127.0.0.1:{port}", file=sys.stderr)
        mcp.run(transport=transport, host="127.0.0.1", port=port)
    else:
        print("reference_server: serving the conformance fixture on stdio", file=sys.stderr)
        mcp.run(transport="stdio")
