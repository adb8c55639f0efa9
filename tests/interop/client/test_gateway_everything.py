"""`droid gateway` carrying all of MCP: npm's `@modelcontextprotocol/server-everything` as the
upstream, over stdio and over Streamable HTTP, and the official Python SDK client as each session,
in the legacy era and in 2026-07-28.

Every test runs against both upstream transports. Resources, templates and prompts come back under
the gateway's names (`everything+demo://…`, `everything/…`) and lead back to the upstream; the
upstream's questions (sampling, elicitation) reach the session whose call asked them and the
answers go back up; progress and log lines reach the calling session only; a cancelled call is
cancelled upstream (seen on the stdio wire); and two sessions never see each other's questions,
notifications or subscriptions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent.parent
DROID = str(REPO / "target" / "debug" / "droid")
EVERYTHING = HERE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
sys.path.insert(0, str(HERE))
from harness import free_port, stop, wait_for_port  # noqa: E402 (found through the path just set)
from tasks_extension import Tasks  # noqa: E402

ERAS = ["legacy", "2026-07-28"]
STATIC = "everything+demo://resource/static/document/features.md"
TEMPLATE = "everything+demo://resource/dynamic/text/{resourceId}"


@pytest.fixture(scope="module", params=["stdio", "http"])
def gateway(request, tmp_path_factory):
    """The gateway in front of server-everything over `request.param`; over stdio through
    `wiretap.py`, whose log shows what the gateway sent upstream."""
    folder = tmp_path_factory.mktemp(f"everything-{request.param}")
    wire = folder / "wire"
    procs = []
    try:
        if request.param == "stdio":
            upstream = {
                "command": sys.executable,
                "args": [str(HERE / "wiretap.py"), "node", str(EVERYTHING), "stdio"],
                "env": {"WIRETAP_DIR": str(wire)},
            }
        else:
            port = free_port()
            server = subprocess.Popen(
                ["node", "--require", str(HERE / "loopback.cjs"), str(EVERYTHING), "streamableHttp"],
                env={**os.environ, "PORT": str(port)},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(server)
            wait_for_port(port, server, "server-everything")
            upstream = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
        config = folder / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"everything": upstream}}))
        gw_port = free_port()
        log = folder / "gateway.log"
        gw = subprocess.Popen(
            [DROID, "gateway", "--config", str(config), "--listen", f"127.0.0.1:{gw_port}"],
            env={**os.environ, "XDG_STATE_HOME": str(folder / "state")},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w"))
        procs.append(gw)
        wait_for_port(gw_port, gw, "the gateway", log)
        yield {"url": f"http://127.0.0.1:{gw_port}/mcp", "transport": request.param, "wire": wire}
    finally:
        for proc in reversed(procs):
            stop(proc)


class Session:
    """One client session and what reached it: notifications, log lines, questions asked."""

    def __init__(self, url: str, era: str, name: str = "session"):
        self.name = name
        self.era = era
        self.notices: list[tuple[str, object]] = []
        self.logs: list[str] = []
        self.asked: list[str] = []
        self.client = Client(url, mode=era, read_timeout_seconds=60, log_level="debug",
                             sampling_callback=self._sample, elicitation_callback=self._elicit,
                             logging_callback=self._log, message_handler=self._notice)

    async def _sample(self, ctx, params: types.CreateMessageRequestParams):
        self.asked.append("sampling")
        return types.CreateMessageResult(
            role="assistant", model="test-model", stop_reason="endTurn",
            content=types.TextContent(type="text", text=f"sampled by {self.name}"))

    async def _elicit(self, ctx, params):
        self.asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"name": self.name, "color": "teal"})

    async def _log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(str(params.data))

    async def _notice(self, message) -> None:
        inner = getattr(message, "root", message)
        method = getattr(inner, "method", None)
        if isinstance(method, str):
            self.notices.append((method, getattr(getattr(inner, "params", None), "uri", None)))

    async def __aenter__(self) -> "Session":
        await self.client.__aenter__()
        # A legacy session sets its level once; a 2026-07-28 request carries it (`log_level`).
        if self.era == "legacy":
            await self.client.set_logging_level("debug")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.__aexit__(*exc)


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


async def eventually(check, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await anyio.sleep(0.1)


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_resources_and_templates_under_the_gateway_names(gateway, era):
    async with Session(gateway["url"], era) as s:
        uris, cursor = [], None
        while True:
            page = await s.client.list_resources(cursor=cursor) if cursor else await s.client.list_resources()
            uris += [str(r.uri) for r in page.resources]
            cursor = page.next_cursor
            if not cursor:
                break
        assert STATIC in uris, uris
        assert all(u.startswith("everything+demo://") for u in uris), uris

        read = await s.client.read_resource(STATIC)
        assert str(read.contents[0].uri) == STATIC and read.contents[0].text, read

        templates = await s.client.list_resource_templates()
        assert TEMPLATE in [t.uri_template for t in templates.resource_templates], templates
        expanded = TEMPLATE.replace("{resourceId}", "7")
        read = await s.client.read_resource(expanded)
        assert str(read.contents[0].uri) == expanded and "Resource 7" in read.contents[0].text, read

        # A URI of no upstream, or the upstream's own form, is unknown to the gateway.
        with pytest.raises(Exception):
            await s.client.read_resource("demo://resource/static/document/features.md")

        # A tool's resource links lead back through the gateway.
        links = await s.client.call_tool("everything/get-resource-links", {"count": 2})
        linked = [str(c.uri) for c in links.content if c.type == "resource_link"]
        assert linked and all(u.startswith("everything+demo://") for u in linked), links
        assert (await s.client.read_resource(linked[0])).contents


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_prompts_with_arguments_and_a_completion(gateway, era):
    async with Session(gateway["url"], era) as s:
        listed = {p.name for p in (await s.client.list_prompts()).prompts}
        assert {"everything/simple-prompt", "everything/args-prompt", "everything/completable-prompt"} <= listed

        got = await s.client.get_prompt("everything/args-prompt", {"city": "Lyon", "state": "Rhône"})
        assert "Lyon" in got.messages[0].content.text, got

        completed = await s.client.complete(
            types.PromptReference(type="ref/prompt", name="everything/completable-prompt"),
            {"name": "department", "value": "Eng"})
        assert completed.completion.values == ["Engineering"], completed

        with pytest.raises(Exception):
            await s.client.get_prompt("args-prompt", {"city": "Lyon"})


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_sampling_and_elicitation_reach_the_calling_session(gateway, era):
    async with Session(gateway["url"], era, "alice") as alice, Session(gateway["url"], era, "bob") as bob:
        sampled = await alice.client.call_tool("everything/trigger-sampling-request",
                                               {"prompt": "hello", "maxTokens": 10})
        assert not sampled.is_error and "sampled by alice" in text(sampled), text(sampled)

        elicited = await alice.client.call_tool("everything/trigger-elicitation-request", {})
        assert not elicited.is_error and "alice" in text(elicited) and "teal" in text(elicited), text(elicited)

        assert alice.asked == ["sampling", "elicitation"], alice.asked
        assert bob.asked == [], bob.asked


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_progress_and_log_lines_reach_only_the_calling_session(gateway, era):
    async with Session(gateway["url"], era, "alice") as alice, Session(gateway["url"], era, "bob") as bob:
        progress: list[float] = []

        async def on_progress(value, total, message):
            progress.append(value)

        done = await alice.client.call_tool("everything/trigger-long-running-operation",
                                            {"duration": 1, "steps": 4}, progress_callback=on_progress)
        assert not done.is_error, text(done)
        assert progress == [1.0, 2.0, 3.0, 4.0], progress

        # The upstream logs once during the call, and (for a legacy session) every few seconds
        # after it on that session's own connection.
        toggled = await alice.client.call_tool("everything/toggle-simulated-logging", {})
        assert not toggled.is_error, text(toggled)
        await eventually(lambda: alice.logs, "a log line for the session that asked")
        if era == "legacy":
            await eventually(lambda: len(alice.logs) >= 2, "a log line outside the call", timeout=15)
        assert bob.logs == [], bob.logs
        assert not any(m == "notifications/progress" for m, _ in bob.notices), bob.notices


@pytest.mark.anyio
async def test_a_subscription_is_the_subscribing_sessions_own(gateway):
    """Legacy sessions: each subscribes on its own upstream session, where server-everything
    sends the updates that session turned on. Both sessions subscribe to one resource and only
    Alice turns updates on: the update arrives under the gateway's URI, to Alice only."""
    uri = TEMPLATE.replace("{resourceId}", "1")
    async with Session(gateway["url"], "legacy", "alice") as alice, \
            Session(gateway["url"], "legacy", "bob") as bob:
        await alice.client.subscribe_resource(uri)
        await bob.client.subscribe_resource(uri)
        assert not (await alice.client.call_tool("everything/toggle-subscriber-updates", {})).is_error
        await eventually(lambda: ("notifications/resources/updated", uri) in alice.notices,
                         "the update of the subscribed resource", timeout=15)
        await anyio.sleep(1)
        assert not any(m == "notifications/resources/updated" for m, _ in bob.notices), bob.notices
        await alice.client.unsubscribe_resource(uri)


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_a_cancelled_call_is_cancelled_upstream(gateway, era):
    if gateway["transport"] != "stdio":
        pytest.skip("what the gateway sends upstream is seen on the stdio wire")
    async with Session(gateway["url"], era) as s:
        started = anyio.Event()

        async def on_progress(value, total, message):
            started.set()

        with anyio.move_on_after(30):
            async with anyio.create_task_group() as tasks:
                async def long_call():
                    await s.client.call_tool("everything/trigger-long-running-operation",
                                             {"duration": 60, "steps": 60}, progress_callback=on_progress)

                tasks.start_soon(long_call)
                await started.wait()
                tasks.cancel_scope.cancel()
        assert started.is_set(), "the call never reported progress"

        def cancelled_upstream() -> bool:
            lines = [l for f in gateway["wire"].glob("*.log") for l in f.read_text().splitlines()]
            calls = {json.loads(l.split(" > ", 1)[1]).get("id") for l in lines
                     if " > " in l and "trigger-long-running-operation" in l}
            cancels = [json.loads(l.split(" > ", 1)[1]) for l in lines
                       if " > " in l and "notifications/cancelled" in l]
            return any(c["params"].get("requestId") in calls for c in cancels)

        await eventually(cancelled_upstream, "notifications/cancelled for the call, upstream")


@pytest.mark.anyio
async def test_a_task_only_tool_runs_as_the_gateways_task_with_its_question_answered(gateway):
    """2026-07-28 with the tasks extension (the SDK's extension API, tasks_extension.py): the
    upstream's `simulate-research-query` only runs as a task upstream; through the gateway it is a
    task of the gateway's own, and the clarification the upstream asks from inside its task parks
    the gateway's task until the client answers it with `tasks/update`."""
    tasks = Tasks(lambda schema: {key: "the history of tea" for key in (schema.get("properties") or {})})

    async def not_in_a_task(ctx, params):
        raise AssertionError(f"a task's question came as an input round: {params}")

    # The callback declares elicitation, which the question needs; it is answered through the task.
    client = Client(gateway["url"], mode="2026-07-28", read_timeout_seconds=60, extensions=[tasks],
                    elicitation_callback=not_in_a_task)
    async with client:
        plain = await client.call_tool("everything/simulate-research-query", {"topic": "tea"})
        assert not plain.is_error and "Research Report: tea" in text(plain), text(plain)
        asked = await client.call_tool(
            "everything/simulate-research-query", {"topic": "leaves", "ambiguous": True})
        assert not asked.is_error, text(asked)
        assert "Research Report: leaves (the history of tea)" in text(asked), text(asked)
    assert len(tasks.created) == 2, tasks.created
    assert tasks.answered, "the clarification was asked through the task"


@pytest.mark.anyio
async def test_scopes_hide_prompts_resources_and_templates(tmp_path):
    """`[scopes]` rules on a prompt, a resource and a template, by the names sessions see: a
    caller without the scope (here, anyone: no tokens are issued) neither sees them listed nor
    gets, reads or completes them; what no rule names stays open."""
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(f"""
[[upstream]]
name = "everything"
command = ["node", "{EVERYTHING}", "stdio"]
trust = "on-first-use"

[scopes]
"prompt:everything/args-prompt" = "prompts:args"
"resource:{STATIC}" = "docs:read"
"template:{TEMPLATE}" = "notes:read"
""")
    log = tmp_path / "gateway.log"
    gw = subprocess.Popen([DROID, "gateway", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
                          env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")},
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        wait_for_port(port, gw, "the gateway", log)
        async with Session(f"http://127.0.0.1:{port}/mcp", "legacy") as s:
            prompts = {p.name for p in (await s.client.list_prompts()).prompts}
            assert "everything/simple-prompt" in prompts and "everything/args-prompt" not in prompts, prompts
            with pytest.raises(Exception):
                await s.client.get_prompt("everything/args-prompt", {"city": "Lyon", "state": "Rhône"})
            with pytest.raises(Exception):
                await s.client.complete(types.PromptReference(type="ref/prompt", name="everything/args-prompt"),
                                        {"name": "city", "value": "L"})

            uris = {str(r.uri) for r in (await s.client.list_resources()).resources}
            assert STATIC not in uris and uris, uris
            with pytest.raises(Exception):
                await s.client.read_resource(STATIC)

            templates = {t.uri_template for t in (await s.client.list_resource_templates()).resource_templates}
            assert TEMPLATE not in templates and "everything+demo://resource/dynamic/blob/{resourceId}" in templates
            with pytest.raises(Exception):
                await s.client.read_resource(TEMPLATE.replace("{resourceId}", "3"))
            blob = await s.client.read_resource("everything+demo://resource/dynamic/blob/3")
            assert blob.contents, blob
    finally:
        stop(gw)
