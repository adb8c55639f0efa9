#!/usr/bin/env python3
"""Writes the committed seed corpora in fuzz/seeds/<target>/.

Sources: the official 2026-07-28 example messages (a copy is in
crates/protocol-droid/tests/vectors/2026-07-28/examples, the same files as
shared/spec/2026-07-28/examples) and messages from the crates' tests (legacy
revisions, ACP). Each target's seeds start with the control bytes that
target reads first; see the comment at the top of each target.

Run from anywhere: python3 fuzz/seeds/generate.py
"""

import base64
import hashlib
import hmac
import json
import pathlib
import shutil
import struct

FUZZ = pathlib.Path(__file__).resolve().parent.parent
ROOT = FUZZ.parent
EXAMPLES = ROOT / "crates/protocol-droid/tests/vectors/2026-07-28/examples"
SEEDS = FUZZ / "seeds"

REVISIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
# The method list of fuzz_targets/mcp_codec.rs, in its order.
METHODS = [
    "initialize", "ping", "server/discover", "tools/list", "tools/call",
    "prompts/list", "prompts/get", "resources/list", "resources/templates/list",
    "resources/read", "resources/subscribe", "resources/unsubscribe",
    "subscriptions/listen", "logging/setLevel", "completion/complete",
    "tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
    "sampling/createMessage", "roots/list", "elicitation/create",
    "x.example/unknown", "tools/call",
]


def compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def load(name):
    return [json.loads(p.read_text()) for p in sorted((EXAMPLES / name).glob("*.json"))]


def examples():
    """Every example, by its directory name."""
    return {d.name: load(d.name) for d in sorted(EXAMPLES.iterdir()) if d.is_dir()}


# Fragments: the method whose params or result each directory holds.
PARAMS = {
    "CallToolRequestParams": ("request", "tools/call"),
    "CancelledNotificationParams": ("notification", "notifications/cancelled"),
    "CompleteRequestParams": ("request", "completion/complete"),
    "CreateMessageRequestParams": ("request", "sampling/createMessage"),
    "ElicitRequestFormParams": ("request", "elicitation/create"),
    "ElicitRequestURLParams": ("request", "elicitation/create"),
    "GetPromptRequestParams": ("request", "prompts/get"),
    "LoggingMessageNotificationParams": ("notification", "notifications/message"),
    "PaginatedRequestParams": ("request", "tools/list"),
    "ProgressNotificationParams": ("notification", "notifications/progress"),
    "ResourceUpdatedNotificationParams": ("notification", "notifications/resources/updated"),
}
RESULTS = {
    "CallToolResult": "tools/call",
    "CallToolResultResponse": "tools/call",
    "CompleteResult": "completion/complete",
    "CompleteResultResponse": "completion/complete",
    "CreateMessageResult": "sampling/createMessage",
    "DiscoverResult": "server/discover",
    "DiscoverResultResponse": "server/discover",
    "ElicitResult": "elicitation/create",
    "GetPromptResult": "prompts/get",
    "GetPromptResultResponse": "prompts/get",
    "InputRequiredResult": "tools/call",
    "ListPromptsResult": "prompts/list",
    "ListPromptsResultResponse": "prompts/list",
    "ListResourceTemplatesResult": "resources/templates/list",
    "ListResourceTemplatesResultResponse": "resources/templates/list",
    "ListResourcesResult": "resources/list",
    "ListResourcesResultResponse": "resources/list",
    "ListRootsResult": "roots/list",
    "ListToolsResult": "tools/list",
    "ListToolsResultResponse": "tools/list",
    "ReadResourceResult": "resources/read",
    "ReadResourceResultResponse": "resources/read",
    "SubscriptionsListenResult": "subscriptions/listen",
    "SubscriptionsListenResultResponse": "subscriptions/listen",
}

# Legacy-revision messages, as the crates' tests write them.
LEGACY = [
    (0, "initialize", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {"roots": {"listChanged": True}},
        "clientInfo": {"name": "c", "version": "1"}}}),
    (2, "initialize", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}}),
    (0, "initialize", {"jsonrpc": "2.0", "id": 0, "result": {
        "protocolVersion": "2024-11-05", "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": {"name": "s", "version": "1"}, "instructions": "hi"}}),
    (1, "ping", {"jsonrpc": "2.0", "id": "p", "method": "ping"}),
    (1, "ping", {"jsonrpc": "2.0", "id": "p", "result": {}}),
    (1, "initialize", [{"jsonrpc": "2.0", "method": "notifications/initialized"},
                       {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]),
    (2, "logging/setLevel", {"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
                             "params": {"level": "debug"}}),
    (3, "resources/subscribe", {"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe",
                                "params": {"uri": "test://watched-resource"}}),
    (3, "tasks/get", {"jsonrpc": "2.0", "id": 5, "method": "tasks/get",
                      "params": {"taskId": "t1"}}),
    (3, "tools/call", {"jsonrpc": "2.0", "id": 6, "result": {"task": {
        "taskId": "t", "status": "working", "createdAt": "a", "lastUpdatedAt": "b",
        "ttl": 1000}}}),
    (3, "tasks/get", {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {
        "taskId": "t", "status": "completed", "createdAt": "a", "lastUpdatedAt": "b",
        "ttl": 1000}}),
    (2, "roots/list", {"jsonrpc": "2.0", "id": 7, "method": "roots/list"}),
    (2, "roots/list", {"jsonrpc": "2.0", "id": 7, "result": {
        "roots": [{"uri": "file:///home/u/project", "name": "project"}]}}),
    (2, "elicitation/create", {"jsonrpc": "2.0", "id": 8, "method": "elicitation/create",
                               "params": {"message": "Who?", "requestedSchema": {
                                   "type": "object",
                                   "properties": {"name": {"type": "string"}}}}}),
    (0, "tools/call", {"jsonrpc": "2.0", "id": 9, "result": {
        "content": [{"type": "text", "text": "22.5"}], "isError": False}}),
    (2, "tools/call", {"jsonrpc": "2.0", "id": 9, "result": {
        "content": [{"type": "text", "text": "22.5"}],
        "structuredContent": {"celsius": 22.5}}}),
    (1, "tools/call", {"jsonrpc": "2.0", "method": "notifications/progress", "params": {
        "progressToken": "tok", "progress": 1, "total": 2, "message": "half"}}),
]

ACP = [
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}},
        "clientInfo": {"name": "zed", "version": "1"}}},
    {"jsonrpc": "2.0", "id": "new", "method": "session/new",
     "params": {"cwd": "/tmp", "mcpServers": []}},
    {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
     "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hello"}]}},
    {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}},
    {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 42}},
    {"jsonrpc": "2.0", "id": None, "method": "_x/y", "params": {"a": 1}},
    {"jsonrpc": "2.0", "id": 11, "method": "session/set_config_option",
     "params": {"sessionId": "s", "configId": "c", "type": "boolean", "value": True}},
    {"jsonrpc": "2.0", "id": 99, "result": {}},
    {"jsonrpc": "2.0", "id": 3, "error": {"code": -32002, "message": "Resource not found"}},
]

# fuzz_targets/request_state.rs: the sealer's keys and the fixed binding.
KEYS = {"fuzz-current": bytes([7] * 32), "fuzz-previous": bytes([9] * 32)}
NOW = 1_800_000_000_000
LABEL = b"protocol-droid/requestState/v1\0"


def field(data):
    return struct.pack(">Q", len(data)) + data


def digest(params):
    canonical = json.dumps(params, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).digest()


def seal(key_id, payload, expiry, principal="alice", method="tools/call", target="deploy",
         params=None):
    params = params or {"name": "deploy", "arguments": {"env": "prod"}}
    key = KEYS[key_id]
    envelope = bytes([1, len(key_id)]) + key_id.encode() + struct.pack(">Q", expiry) + compact(payload)
    bound = LABEL + field(envelope)
    bound += b"\0" if principal is None else b"\1" + field(principal.encode())
    bound += field(method.encode()) + field(target.encode()) + digest(params)
    tag = hmac.new(key, bound, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(envelope + tag).rstrip(b"=")


def write(target, name, data):
    directory = SEEDS / target
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)


def main():
    for target in ["line_framer", "jsonrpc_envelope", "mcp_codec", "sse_client",
                   "http_headers", "request_state", "acp_framer"]:
        shutil.rmtree(SEEDS / target, ignore_errors=True)
    every = examples()
    messages = [(d, m) for d, ms in every.items() for m in ms
                if isinstance(m, dict) and m.get("jsonrpc") == "2.0"]

    # jsonrpc_envelope: every example message as it is written, compact,
    # and a batch.
    for d, path in [(d, p) for d in every for p in sorted((EXAMPLES / d).glob("*.json"))]:
        value = json.loads(path.read_text())
        if isinstance(value, dict) and value.get("jsonrpc") == "2.0":
            write("jsonrpc_envelope", f"{d}-{path.stem}.json", path.read_bytes())
    write("jsonrpc_envelope", "batch.json", compact([m for _, m in messages[:3]] + [5, []]))
    write("jsonrpc_envelope", "empty-batch.json", b"[]")
    write("jsonrpc_envelope", "bad-version.json", b'{"jsonrpc":"1.0","id":2,"method":"x"}')
    write("jsonrpc_envelope", "null-id-error.json",
          b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x","data":[1]}}')
    write("jsonrpc_envelope", "escaped-members.json",
          b'{"jsonr\\u0070c":"2.0","i\\u0064":3,"result":{}}')

    # line_framer: [limit, cut seed] + lines.
    lines = [compact(m) for _, m in messages]
    write("line_framer", "lf-64", bytes([63, 1]) + b"\n".join(lines[:6]) + b"\n")
    write("line_framer", "crlf-64", bytes([63, 7]) + b"\r\n".join(lines[6:12]) + b"\r\n")
    write("line_framer", "short-lines", bytes([15, 3]) + b'{}\n\n  \n{"a":1}\r\n[[[]]]\n{"b"')
    write("line_framer", "crlf-at-limit", bytes([3, 5]) + b"abcd\r\nxy\r\n\r\n")
    write("line_framer", "overflow", bytes([7, 9]) + b"0123456789abcdef\nok\n0123456789")

    # mcp_codec: [revision, method] + frame.
    def codec(name, revision, method, frame):
        write("mcp_codec", name, bytes([revision, METHODS.index(method)]) + compact(frame))

    for d, ms in every.items():
        for i, m in enumerate(ms):
            if isinstance(m, dict) and m.get("jsonrpc") == "2.0":
                method = RESULTS.get(d, "x.example/unknown")
                codec(f"{d}-{i}-modern", 4, method, m)
                codec(f"{d}-{i}-legacy", 3, method, m)
            elif d in PARAMS:
                kind, method = PARAMS[d]
                frame = {"jsonrpc": "2.0", "method": method, "params": m}
                if kind == "request":
                    frame["id"] = i
                codec(f"{d}-{i}-modern", 4, "tools/call", frame)
                codec(f"{d}-{i}-legacy", 3, "tools/call", frame)
            elif d in RESULTS:
                frame = {"jsonrpc": "2.0", "id": i, "result": m}
                codec(f"{d}-{i}-modern", 4, RESULTS[d], frame)
                codec(f"{d}-{i}-legacy", 2, RESULTS[d], frame)
    for i, (revision, method, frame) in enumerate(LEGACY):
        codec(f"legacy-{i}-{REVISIONS[revision]}", revision, method, frame)

    # sse_client: [mode] + event stream.
    notification = compact(every["ProgressNotification"][0])
    answer = compact(every["CallToolResultResponse"][0])
    write("sse_client", "legacy-endpoint", b"\0" + b"event: endpoint\ndata: /messages?sessionId=1\n\n"
          + b"event: message\ndata: " + notification + b"\n\n"
          + b": keep-alive\n\nevent: message\ndata: " + answer + b"\n\n")
    write("sse_client", "legacy-crlf", b"\0" + b"event: endpoint\r\ndata:  /messages \r\n\r\n"
          + b"data: {\"jsonrpc\":\r\ndata: \"2.0\",\"method\":\"ping\"}\r\n\r\n"
          + b"event: other\ndata: skipped\n\ndata: not json\n\n")
    write("sse_client", "legacy-foreign", b"\0" + b"event: endpoint\ndata: http://evil.example/messages\n\n")
    write("sse_client", "streamable", b"\1" + b"id: 1-1\nretry: 10\ndata: " + notification + b"\n\n"
          + b"id: 1-2\ndata:\n\ndata: " + answer.replace(b'"call-tool-example"', b"1") + b"\n\n")
    write("sse_client", "streamable-cr", b"\1" + b"event: message\rdata: [1,2]\r\r: c\rdata: {\"id\":1}\r\r")
    # Bytes that are not UTF-8, and a sequence the stream goes on after.
    write("sse_client", "legacy-invalid-utf8", b"\0" + b"event: endpoint\ndata: /messages\n\n"
          + b"data: \"\xff\xfe\"\n\nevent: message\ndata: " + notification + b"\n\n")
    write("sse_client", "streamable-invalid-utf8", b"\1" + b"data: [\"\xc3\x28\xe2\x82\"]\n\n"
          + b"data: " + notification + b"\n\n")

    # http_headers: [0] + params, or [1] + header lines, "\n\n", body.
    call = every["CallToolRequest"][0]
    params = {"name": "t", "arguments": {"region": "eu-west1", "n": 3, "flag": True,
                                         "opts": {"zone": "b"}},
              "_meta": call["params"]["_meta"]}
    write("http_headers", "agreed", b"\0" + compact(params))
    write("http_headers", "agreed-unicode", b"\0" + compact(
        {"name": "t", "arguments": {"region": " \u00e9t\u00e9 ", "n": -7, "flag": None}}))
    write("http_headers", "agreed-other-tool", b"\0" + compact(call["params"]))
    body = compact({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    write("http_headers", "raw-agreed", b"\1" + b"mcp-method: tools/call\nmcp-name: t\n"
          b"mcp-param-region: eu-west1\nmcp-param-n: 3\nmcp-param-flag: true\n\n" + body)
    write("http_headers", "raw-base64", b"\1" + b"mcp-method: tools/call\nmcp-name: =?base64?dA==?=\n"
          b"mcp-param-region: =?base64?ZXUtd2VzdDE=?=\nmcp-param-n: 3\nmcp-param-flag: true\n\n" + body)
    write("http_headers", "raw-mismatch", b"\1" + b"mcp-method: tools/list\n\n" + body)
    for d in ["ListToolsRequest", "DiscoverRequest", "ReadResourceRequest", "GetPromptRequest"]:
        message = every[d][0]
        write("http_headers", f"raw-{d}", b"\1" + f"mcp-method: {message['method']}\n\n".encode()
              + compact(message))

    # request_state: [0] + presented state, or [1] + payload \0 principal \0
    # target \0 flip.
    write("request_state", "genuine", b"\0" + seal("fuzz-current", {"step": 2}, NOW + 600_000))
    write("request_state", "genuine-previous-key", b"\0" + seal("fuzz-previous", [1, "two", None], NOW + 1))
    write("request_state", "expired", b"\0" + seal("fuzz-current", {"step": 1}, NOW))
    write("request_state", "other-binding", b"\0" + seal("fuzz-current", {}, NOW + 5, principal=None))
    write("request_state", "unknown-key", b"\0" + base64.urlsafe_b64encode(
        bytes([1, 3]) + b"abc" + struct.pack(">Q", NOW + 5) + b"{}" + bytes(32)).rstrip(b"="))
    write("request_state", "not-base64", b"\0" + b"not base64 at all!")
    write("request_state", "round-trip", b"\1" + b'{"step":2,"asked":["a"]}\0alice\0deploy\0\x05\x00\x41')
    write("request_state", "round-trip-anonymous", b"\1" + b'"x"')

    # acp_framer: [limit, depth, cut seed] + lines.
    acp = [compact(m) for m in ACP]
    write("acp_framer", "session", bytes([5, 63, 1]) + b"\n".join(acp) + b"\n")
    write("acp_framer", "refusals", bytes([2, 3, 2]) + b'{"jsonrpc":"2.0","id":1,INVALID}\n'
          b'{"jsonrpc":"1.0","id":2,"method":"x"}\n{"jsonrpc":"2.0","id":3,"method":7}\n'
          b'{"jsonrpc":"2.0","id":1.5,"method":"_test/ping"}\n[1]\n[[[[[]]]]]\n'
          + b"x" * 300 + b"\n" + b'{"jsonrpc":"2.0","id":5,"method":"session/pro')
    write("acp_framer", "crlf", bytes([7, 63, 3]) + b"\r\n".join(acp[:4]) + b"\r\n")


if __name__ == "__main__":
    main()
