"""`droid bridge` end to end, with the official Python SDK client in both eras.

The upstream is a server built on the official TypeScript SDK (1.x, stdio) with 2025-11-25
tasks: `slow_add` only runs as a task. The bridge offers no tasks of its own; it runs the tool
as a task upstream and answers with the task's result, so a client of any era calls it like
any other tool.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent.parent
DROID = str(REPO / "target" / "debug" / "droid")
TS_SERVERS = str(HERE / "ts" / "servers.mjs")
sys.path.insert(0, str(HERE))
from harness import free_port, stop, wait_for_port  # noqa: E402 (found through the path just set)


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    log = tmp_path_factory.mktemp("bridge") / "bridge.log"
    port = free_port()
    proc = subprocess.Popen(
        [DROID, "bridge", "--listen", f"127.0.0.1:{port}", "--", "node", TS_SERVERS, "sdk1-tasks-stdio"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w"),
    )
    try:
        wait_for_port(port, proc, "the bridge", log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_task_only_tool_is_an_ordinary_call_through_the_bridge(bridge, mode):
    async with Client(bridge, mode=mode, read_timeout_seconds=30) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "slow_add" in listed, sorted(listed)
        # The server only runs it as a task; the bridge runs it either way (its own task for a
        # 2025-11-25 client that asks for one, else in the request), and says so where the
        # client's revision has the field.
        execution = getattr(listed["slow_add"], "execution", None)
        if mode == "legacy":
            assert execution is not None and execution.task_support == "optional", listed["slow_add"]
        else:
            assert execution is None, listed["slow_add"]
        result = await client.call_tool("slow_add", {"a": 2, "b": 3})
        assert not result.is_error, result
        assert [c.text for c in result.content if c.type == "text"] == ["5"]
