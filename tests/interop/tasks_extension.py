"""The `io.modelcontextprotocol/tasks` extension (2026-07-28) as a client runs it, written on the
official Python SDK's own extension API: a `ClientExtension` that declares the extension and claims
`resultType: "task"`, whose resolver polls `tasks/get` at the task's interval and answers the
questions a task waits on with `tasks/update`. The SDK sends the requests (`_meta`, `Mcp-Name`
routing headers and all); this module only names their shapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, Field

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


class TaskIdParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses")


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CreatedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class DetailedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    task_id: str = Field(alias="taskId")
    status: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class Tasks(ClientExtension):
    """The tasks extension as a client runs it: polls each task to its end."""

    identifier = TASKS_EXTENSION

    def __init__(self, fill: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.fill = fill
        self.created: list[str] = []
        self.answered: list[str] = []
        self.sent: set[tuple[str, str]] = set()

    def settings(self) -> dict[str, Any]:
        return {}

    def claims(self):
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created.task_id)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            task = await ctx.session.send_request(GetTask(params=TaskIdParams(taskId=created.task_id)), DetailedTask)
            if task.status == "completed":
                return types.CallToolResult.model_validate(task.result)
            if task.status in ("failed", "cancelled"):
                raise MCPError(**(task.error or {"code": -32603, "message": task.status}))
            # `tasks/update` is eventually consistent: until the instance running the task has
            # the answers, a read (on another instance, say) still shows their questions. A key
            # names one question for the task's lifetime, so each is answered once.
            unanswered = {
                key: request
                for key, request in (task.input_requests or {}).items()
                if (created.task_id, key) not in self.sent
            }
            if task.status == "input_required" and unanswered:
                responses = {}
                for key, request in unanswered.items():
                    schema = request.get("params", {}).get("requestedSchema", {})
                    responses[key] = {"action": "accept", "content": self.fill(schema)}
                    self.answered.append(key)
                    self.sent.add((created.task_id, key))
                await ctx.session.send_request(
                    UpdateTask(params=UpdateTaskParams(taskId=created.task_id, inputResponses=responses)),
                    types.EmptyResult,
                )
                continue
            await anyio.sleep((created.poll_interval_ms or 200) / 1000)
        raise TimeoutError(f"task {created.task_id} did not end")
