// The official ACP TypeScript SDK, as the client, driving `droid acp`, with
// `droid serve` (the fixture MCP server) as each session's stdio MCP server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const DROID = process.env.DROID_BIN;
assert.ok(DROID, "DROID_BIN must name the droid binary");

const SERVER = { name: "droid", command: DROID, args: ["serve"], env: [] };
const INIT = {
  protocolVersion: acp.PROTOCOL_VERSION,
  clientCapabilities: {},
  clientInfo: { name: "acp-interop", version: "0.0.0" },
};

/** Starts `droid acp`, connects the SDK client to it, and runs `op`. */
async function withAgent(op) {
  const child = spawn(DROID, ["acp"], { stdio: ["pipe", "pipe", "inherit"] });
  const updates = [];
  const asked = [];
  const client = {
    // How the next permission request is answered; a test replaces it.
    answer: () => ({ outcome: { outcome: "selected", optionId: "allow-once" } }),
  };
  const app = acp
    .client({ name: "acp-interop" })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      updates.push(params);
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
      asked.push(params);
      return client.answer(params);
    });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  try {
    return await app.connectWith(stream, (ctx) => op({ ctx, updates, asked, client }));
  } finally {
    child.kill();
  }
}

async function newSession(ctx, mcpServers = [SERVER]) {
  await ctx.request(acp.methods.agent.initialize, INIT);
  const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: "/", mcpServers });
  assert.equal(typeof sessionId, "string");
  return sessionId;
}

function prompt(ctx, sessionId, text) {
  return ctx.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text }],
  });
}

/** The updates of one session, from index `from` on. */
function of(updates, sessionId, from = 0) {
  return updates.slice(from).filter((n) => n.sessionId === sessionId).map((n) => n.update);
}

/** Prompts `text` and returns the reply with the session's updates from this turn on. */
async function turn(ctx, updates, sessionId, text) {
  const from = updates.length;
  const reply = await prompt(ctx, sessionId, text);
  return { reply, list: of(updates, sessionId, from) };
}

const said = (list) =>
  list.filter((u) => u.sessionUpdate === "agent_message_chunk").map((u) => u.content.text).join("");
const statuses = (list) =>
  list.filter((u) => u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update").map((u) => u.status);

async function waitFor(predicate, ms = 20000) {
  const until = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > until) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("initialize answers protocol 1 with loadSession and MCP over http and sse", () =>
  withAgent(async ({ ctx }) => {
    const init = await ctx.request(acp.methods.agent.initialize, INIT);
    assert.equal(init.protocolVersion, 1);
    assert.equal(init.agentCapabilities.loadSession, true);
    assert.deepEqual(init.agentCapabilities.mcpCapabilities, { http: true, sse: true });
    assert.equal(init.agentInfo.name, "droid");
  }));

test("tools lists droid serve's tools as SERVER/TOOL, marking the destructive one", () =>
  withAgent(async ({ ctx, updates }) => {
    const sessionId = await newSession(ctx);
    const { reply, list } = await turn(ctx, updates, sessionId, "tools");
    assert.equal(reply.stopReason, "end_turn");
    const text = said(list);
    assert.match(text, /^droid\/test_simple_text - /m);
    assert.match(text, /^droid\/delete_note - .*\[asks first\]$/m);
  }));

test("call runs a tool as a tool call from pending to completed", () =>
  withAgent(async ({ ctx, updates, asked }) => {
    const sessionId = await newSession(ctx);
    const { reply, list } = await turn(ctx, updates, sessionId, "call droid/test_simple_text");
    assert.equal(reply.stopReason, "end_turn");
    assert.deepEqual(statuses(list), ["pending", "in_progress", "completed"]);
    const done = list.find((u) => u.status === "completed");
    assert.equal(done.content[0].content.text, "This is a simple text response for testing.");
    assert.equal(asked.length, 0, "a harmless tool asks nothing");
  }));

test("a destructive tool asks permission and runs once allowed", () =>
  withAgent(async ({ ctx, updates, asked }) => {
    const sessionId = await newSession(ctx);
    const { reply, list } = await turn(ctx, updates, sessionId, 'call delete_note {"id": "7"}');
    assert.equal(reply.stopReason, "end_turn");
    assert.equal(asked.length, 1);
    assert.equal(asked[0].toolCall.title, "droid/delete_note");
    const kinds = asked[0].options.map((o) => o.kind);
    assert.ok(kinds.includes("allow_once") && kinds.includes("reject_once"), String(kinds));
    assert.deepEqual(statuses(list), ["pending", "in_progress", "completed"]);
    assert.equal(list.find((u) => u.status === "completed").content[0].content.text, "Deleted note 7.");
  }));

test("a rejected destructive call is not made and its tool call fails", () =>
  withAgent(async ({ ctx, updates, asked, client }) => {
    const sessionId = await newSession(ctx);
    client.answer = (params) => ({
      outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === "reject_once").optionId },
    });
    const { reply, list } = await turn(ctx, updates, sessionId, 'call delete_note {"id": "7"}');
    assert.equal(reply.stopReason, "end_turn");
    assert.equal(asked.length, 1);
    assert.deepEqual(statuses(list), ["pending", "failed"]);
  }));

test("session/cancel ends a running call's turn as cancelled, with nothing after", () =>
  withAgent(async ({ ctx, updates }) => {
    const sessionId = await newSession(ctx);
    const from = updates.length;
    const started = Date.now();
    const turn = prompt(ctx, sessionId, 'call sleep {"ms": 20000}');
    await waitFor(() => statuses(of(updates, sessionId, from)).includes("in_progress"));
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
    const reply = await turn;
    assert.equal(reply.stopReason, "cancelled");
    assert.ok(Date.now() - started < 15000, "the turn waited for the tool");
    const seen = updates.length;
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(updates.length, seen, "an update followed the cancelled turn's reply");
    assert.deepEqual(statuses(of(updates, sessionId, from)), ["pending", "in_progress", "failed"]);
    // The session takes the next prompt.
    const next = await prompt(ctx, sessionId, "call droid/test_simple_text");
    assert.equal(next.stopReason, "end_turn");
  }));

test("session/load replays the conversation before answering", () =>
  withAgent(async ({ ctx, updates }) => {
    const sessionId = await newSession(ctx);
    await prompt(ctx, sessionId, "help");
    const sent = of(updates, sessionId).filter((u) => u.sessionUpdate === "agent_message_chunk");
    const from = updates.length;
    await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: "/", mcpServers: [SERVER] });
    // The agent announces its commands after answering session/new, from
    // another task than the one that answers the first prompt, so on a busy
    // machine that announcement can arrive after the prompt's answer. It is
    // not part of the replay.
    const replayed = of(updates, sessionId, from).filter(
      (u) => u.sessionUpdate !== "available_commands_update",
    );
    assert.deepEqual(replayed[0], {
      sessionUpdate: "user_message_chunk",
      content: { type: "text", text: "help" },
    });
    assert.deepEqual(
      replayed.filter((u) => u.sessionUpdate === "agent_message_chunk"),
      sent,
    );
  }));

test("an unknown session is an error, and malformed arguments are a message", () =>
  withAgent(async ({ ctx, updates }) => {
    await assert.rejects(prompt(ctx, "no-such-session", "help"), (e) => e.code === -32002);
    const sessionId = await newSession(ctx);
    const { reply, list } = await turn(ctx, updates, sessionId, 'call test_simple_text {"oops": ');
    assert.equal(reply.stopReason, "end_turn");
    assert.match(said(list), /not JSON/);
  }));

test("a server that fails to start is reported in the session, which still works", () =>
  withAgent(async ({ ctx, updates }) => {
    const ghost = { name: "ghost", command: "/nonexistent/mcp-server", args: [], env: [] };
    const sessionId = await newSession(ctx, [ghost, SERVER]);
    await waitFor(() => said(of(updates, sessionId)).includes("ghost"));
    const reply = await prompt(ctx, sessionId, "call test_simple_text");
    assert.equal(reply.stopReason, "end_turn");
  }));
