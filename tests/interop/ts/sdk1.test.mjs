// TypeScript SDK 1.x (@modelcontextprotocol/sdk 1.32.x) as a legacy-era client of `droid serve` over stdio.
//
// Revision: INTEROP_REVISION (default 2025-11-25, the SDK's LATEST_PROTOCOL_VERSION). The 1.x Client
// hard-codes LATEST_PROTOCOL_VERSION in its initialize request (no option exists), so for an older
// revision the recorded transport (F.recordTransport) rewrites `params.protocolVersion` of the outgoing `initialize`. The
// client itself accepts any version in its SUPPORTED_PROTOCOL_VERSIONS in the answer.
//
// Transport: INTEROP_TRANSPORT (F.TRANSPORT). `stdio` (default) spawns DROID_SERVER_CMD; `http` uses the
// SDK's StreamableHTTPClientTransport against INTEROP_HTTP_URL (a `droid serve --listen` run.sh started),
// with a recording fetch (F.recordingFetch) so HTTP-level behaviour (resumption) can be asserted; `sse`
// uses the SDK's (deprecated) SSEClientTransport against the 2024-11-05 HTTP+SSE endpoint at /sse.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import {
    CallToolResultSchema,
    CreateMessageRequestSchema,
    ElicitRequestSchema,
    ListRootsRequestSchema,
    LoggingMessageNotificationSchema,
    PromptListChangedNotificationSchema,
    ToolListChangedNotificationSchema,
    LATEST_PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS
} from '@modelcontextprotocol/sdk/types.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks';
import * as F from './common.mjs';

const REVISION = process.env.INTEROP_REVISION || LATEST_PROTOCOL_VERSION;
// Features that do not exist at older revisions are neither declared nor exercised there.
const HAS_ELICITATION = REVISION >= '2025-06-18';
const HAS_AUDIO_AND_COMPLETIONS = REVISION >= '2025-03-26';

/** A fresh client transport of the kind INTEROP_TRANSPORT selects, and its HTTP log (empty on stdio). */
function newTransport() {
    const fetch = F.recordingFetch();
    if (F.TRANSPORT === 'http') return { t: new StreamableHTTPClientTransport(F.httpUrl('/mcp'), { fetch }), http: fetch.log };
    if (F.TRANSPORT === 'sse') return { t: new SSEClientTransport(F.httpUrl('/sse'), { fetch }), http: fetch.log };
    return { t: new StdioClientTransport(F.stdioParams()), http: [] };
}

describe(`TS SDK 1.x client, legacy era, protocolVersion ${REVISION}, transport ${F.TRANSPORT}`, () => {
    let client;
    let transport;
    let wire;
    let http;   // the recorded HTTP exchanges of the main client (http/sse transports)
    const samplingRequests = [];
    const elicitRequests = [];
    const logs = [];
    const rootsRequests = [];
    const changed = [];
    let listedTools = [];

    before(async () => {
        assert.ok(SUPPORTED_PROTOCOL_VERSIONS.includes(REVISION), `SDK 1.x cannot speak ${REVISION}`);
        ({ client, transport, wire, http } = await connectClient(
            HAS_ELICITATION ? { sampling: {}, elicitation: {}, roots: {} } : { sampling: {}, roots: {} }
        ));
    });

    /** A connected 1.x client declaring `capabilities`, with handlers for exactly those. */
    async function connectClient(capabilities) {
        const c = new Client({ name: 'droid-interop-ts-sdk1', version: '1.0.0' }, { capabilities });
        if (capabilities.sampling)
            c.setRequestHandler(CreateMessageRequestSchema, async req => {
                samplingRequests.push(req.params);
                return F.samplingAnswer();
            });
        if (capabilities.elicitation)
            c.setRequestHandler(ElicitRequestSchema, async req => {
                elicitRequests.push(req.params);
                return { action: 'accept', content: F.fillElicitation(req.params.requestedSchema) };
            });
        if (capabilities.roots)
            c.setRequestHandler(ListRootsRequestSchema, async () => {
                rootsRequests.push(1);
                return { roots: F.ROOTS };
            });
        c.setNotificationHandler(LoggingMessageNotificationSchema, n => {
            logs.push(n.params);
        });
        c.setNotificationHandler(ToolListChangedNotificationSchema, () => changed.push('tools'));
        c.setNotificationHandler(PromptListChangedNotificationSchema, () => changed.push('prompts'));
        const { t, http: h } = newTransport();
        const w = F.recordTransport(t, m =>
            m.method === 'initialize' && REVISION !== LATEST_PROTOCOL_VERSION
                ? { ...m, params: { ...m.params, protocolVersion: REVISION } }
                : m
        );
        await c.connect(t);
        return { client: c, transport: t, wire: w, http: h };
    }

    after(async () => {
        await client?.close();
    });

    it('initialize handshake negotiates the requested revision', () => {
        const init = wire.sent[0];
        assert.equal(init.method, 'initialize', 'the first message the 1.x client sends is initialize');
        assert.equal(init.params.protocolVersion, REVISION);
        const reply = wire.received.find(m => m.id === init.id);
        assert.ok(reply?.result, `initialize failed: ${JSON.stringify(reply)}`);
        assert.equal(reply.result.protocolVersion, REVISION, 'server must echo a supported requested version');
        assert.ok(reply.result.serverInfo?.name, 'serverInfo.name required');
        assert.equal(wire.sent[1]?.method, 'notifications/initialized');
        const caps = client.getServerCapabilities();
        const expected = ['tools', 'resources', 'prompts', 'logging', ...(HAS_AUDIO_AND_COMPLETIONS ? ['completions'] : [])];
        for (const c of expected) assert.ok(caps?.[c], `capability ${c} missing`);
    });

    it('ping', async () => {
        assert.deepEqual(await client.ping(), {});
    });

    it('tools/list has every legacy fixture tool with description and inputSchema', async () => {
        const { tools } = await client.listTools();
        F.assertToolList(tools, 'legacy');
        listedTools = tools.map(t => t.name);
    });

    F.itCallsTheContentTools(() => client, { audioSkip: !HAS_AUDIO_AND_COMPLETIONS && `no audio content at ${REVISION}` });

    it('test_tool_with_progress emits progress 0/50/100', async () => {
        const events = [];
        const r = await client.callTool({ name: 'test_tool_with_progress' }, CallToolResultSchema, {
            onprogress: p => events.push(p)
        });
        F.assertProgress(r, events, wire);
    });

    it('logging/setLevel then test_tool_with_logging emits the three info messages', async () => {
        assert.deepEqual(await client.setLoggingLevel('debug'), {});
        logs.length = 0;
        const r = await client.callTool({ name: 'test_tool_with_logging' });
        assert.notEqual(r.isError, true);
        // notifications are delivered before the response on one ordered stream
        const info = logs.filter(l => l.level === 'info').map(l => l.data);
        assert.deepEqual(info.slice(0, 3), F.FIXTURE.texts.logMessages, `log messages: ${JSON.stringify(logs)}`);
    });

    /** Calls `name`, which asks the client a `method` request; over HTTP that must travel on the call's own POST event stream. */
    async function callAsking(name, args, method) {
        const from = http.length;
        const r = await client.callTool({ name, arguments: args });
        if (F.TRANSPORT === 'http') await F.assertBackChannel(http.slice(from), name, method);
        return r;
    }

    it('test_sampling goes through the client sampling handler', async () => {
        samplingRequests.length = 0;
        const r = await callAsking('test_sampling', { prompt: 'interop sampling prompt' }, 'sampling/createMessage');
        assert.notEqual(r.isError, true);
        assert.equal(samplingRequests.length, 1, 'exactly one sampling/createMessage');
        const m = samplingRequests[0].messages;
        assert.equal(m[0].role, 'user');
        assert.equal(m[0].content.text, 'interop sampling prompt');
        assert.equal(samplingRequests[0].maxTokens, 100);
        assert.equal(F.onlyText(r), `LLM response: ${F.FIXTURE.client.samplingAnswer}`);
    });

    it('test_elicitation goes through the client elicitation handler', async () => {
        if (!HAS_ELICITATION) return expectNoElicitation('test_elicitation', { message: 'interop elicitation message' });
        elicitRequests.length = 0;
        const r = await callAsking('test_elicitation', { message: 'interop elicitation message' }, 'elicitation/create');
        assert.notEqual(r.isError, true);
        assert.equal(elicitRequests.length, 1, 'exactly one elicitation/create');
        assert.equal(elicitRequests[0].message, 'interop elicitation message');
        assert.equal(elicitRequests[0].requestedSchema?.type, 'object');
        const text = F.onlyText(r);
        assert.ok(text.startsWith('User response: action=accept'), text);
        assert.ok(text.includes(F.FIXTURE.client.elicitString) || text.includes(F.FIXTURE.client.elicitName), `answer not reflected: ${text}`);
    });

    /** At a revision without elicitation the client declares none, so an eliciting call must fail. */
    async function expectNoElicitation(name, args) {
        const how = await F.expectFailure(() => client.callTool({ name, arguments: args }));
        console.log(`# ${name} at ${REVISION} (no elicitation capability) failed as expected: ${how}`);
    }

    for (const name of ['test_elicitation_sep1034_defaults', 'test_elicitation_sep1330_enums']) {
        const check = name.endsWith('defaults') ? F.assertDefaultsSchema : F.assertEnumsSchema;
        it(`${name}: the client receives the schema and the tool reflects the answer`, async () => {
            if (!HAS_ELICITATION) return expectNoElicitation(name);
            elicitRequests.length = 0;
            const r = await client.callTool({ name });
            assert.equal(elicitRequests.length, 1, 'exactly one elicitation/create');
            check(elicitRequests[0]);
            F.assertElicitationCompleted(r, elicitRequests[0]);
        });
    }

    // Streamable HTTP at 2025-11-25 (SSE polling): the server primes the POST stream (id, empty data, retry: 500),
    // closes it, and delivers the result when the client resumes with GET + Last-Event-ID. Elsewhere it just answers,
    // and so does a bridge: closing the stream is the fixture's transport's doing, which the bridge's own does not copy.
    const RESUMES = F.TRANSPORT === 'http' && REVISION >= '2025-11-25' && !F.BRIDGED;
    it(`test_reconnection (${RESUMES ? 'HTTP: answered on the GET + Last-Event-ID resumption' : `${F.TRANSPORT}: just answers`})`, async () => {
        const tokens = [];
        const from = http.length;
        const r = await client.callTool({ name: 'test_reconnection' }, CallToolResultSchema, { onresumptiontoken: id => tokens.push(id), timeout: 10_000 });
        assert.equal(F.onlyText(r), 'Reconnection test completed');
        if (!RESUMES) return;
        const { priming, get } = await F.assertResumed(http.slice(from), 'test_reconnection');
        assert.equal(tokens[0], priming.id, `the SDK's onresumptiontoken hook saw ${JSON.stringify(tokens)}`);
        console.log(`# resumed: POST primed id ${priming.id} (retry ${priming.retry}) and closed; GET Last-Event-ID ${get.headers['last-event-id']} carried the result`);
    });

    it('test_x_mcp_header: answers with the region it was given', async () =>
        assert.equal(F.onlyText(await client.callTool({ name: 'test_x_mcp_header', arguments: { region: 'eu-west' } })), 'Region: eu-west'));

    it('test_missing_capability: succeeds when sampling was declared at initialize', async () => {
        const r = await client.callTool({ name: 'test_missing_capability' });
        assert.equal(F.onlyText(r), 'The client declared sampling.');
    });

    it('test_missing_capability: -32021 {requiredCapabilities:{sampling:{}}} when sampling was not declared', async () => {
        const other = await connectClient({});
        try {
            await assert.rejects(other.client.callTool({ name: 'test_missing_capability' }), e => {
                assert.equal(e.code, -32021, `code ${e.code}: ${e.message}`);
                assert.deepEqual(e.data?.requiredCapabilities, { sampling: {} });
                return true;
            });
        } finally {
            await other.client.close();
        }
    });

    it('test_logging_tool: logs after logging/setLevel', async () => {
        assert.deepEqual(await client.setLoggingLevel('debug'), {});
        logs.length = 0;
        const r = await client.callTool({ name: 'test_logging_tool' });
        assert.equal(F.onlyText(r), 'Logging tool completed');
        assert.deepEqual(logs.map(l => [l.level, l.data]), [['info', 'Logging tool executed']]);
    });

    it('test_streaming_elicitation: progress and logs, then the result', async () => {
        assert.deepEqual(await client.setLoggingLevel('debug'), {});
        logs.length = 0;
        const events = [];
        const r = await client.callTool({ name: 'test_streaming_elicitation' }, CallToolResultSchema, { onprogress: p => events.push(p) });
        assert.equal(F.onlyText(r), 'Streaming completed');
        const req = wire.sent.filter(m => m.method === 'tools/call' && m.params?.name === 'test_streaming_elicitation').at(-1);
        const respAt = wire.received.findIndex(m => m.id === req.id && ('result' in m || 'error' in m));
        const before = wire.received.slice(0, respAt);
        const progress = before.filter(m => m.method === 'notifications/progress' && m.params.progressToken === req.params._meta.progressToken);
        assert.deepEqual(progress.map(m => [m.params.progress, m.params.total, m.params.message]),
            [[0, 100, 'streaming'], [50, 100, 'streaming'], [100, 100, 'streaming']]);
        assert.deepEqual(logs.map(l => l.data), ['step 0', 'step 50', 'step 100']);
    });

    for (const [name, kind, text] of [
        ['test_trigger_tool_change', 'tools', 'Tool list change triggered'],
        ['test_trigger_prompt_change', 'prompts', 'Prompt list change triggered']
    ]) {
        it(`${name}: succeeds and notifications/${kind}/list_changed arrives`, async () => {
            changed.length = 0;
            assert.equal(F.onlyText(await client.callTool({ name })), text);
            await F.waitFor(() => changed.includes(kind), 2000, `notifications/${kind}/list_changed`);
        });
    }

    // The 2026 input-required tools also exist in the legacy era: their questions arrive as server-to-client requests.
    it('test_input_required_result_elicitation (legacy: elicitation/create request)', async () => {
        if (!HAS_ELICITATION) return expectNoElicitation('test_input_required_result_elicitation');
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_elicitation' });
        assert.equal(elicitRequests.length, 1);
        assert.equal(elicitRequests[0].message, 'What is your name?');
        assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}!`);
    });

    it('test_input_required_result_sampling (legacy: sampling/createMessage request)', async () => {
        samplingRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_sampling' });
        assert.equal(samplingRequests.length, 1);
        assert.equal(samplingRequests[0].messages[0].content.text, 'What is the capital of France?');
        assert.equal(samplingRequests[0].maxTokens, 100);
        assert.equal(F.onlyText(r), `The model answered: ${F.FIXTURE.client.samplingAnswer}`);
    });

    it('test_input_required_result_list_roots (legacy: roots/list request)', async () => {
        rootsRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_list_roots' });
        assert.equal(rootsRequests.length, 1);
        F.assertRootsText(r);
    });

    it('test_input_required_result_request_state (legacy)', async () => {
        if (!HAS_ELICITATION) return expectNoElicitation('test_input_required_result_request_state');
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_request_state' });
        assert.equal(elicitRequests.length, 1);
        assert.equal(elicitRequests[0].message, 'Please confirm');
        assert.equal(F.onlyText(r), 'state-ok: confirmed={"ok":true}');
    });

    it('test_input_required_result_multiple_inputs (legacy)', async () => {
        if (!HAS_ELICITATION) return expectNoElicitation('test_input_required_result_multiple_inputs');
        elicitRequests.length = 0; samplingRequests.length = 0; rootsRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_multiple_inputs' });
        assert.deepEqual([elicitRequests.length, samplingRequests.length, rootsRequests.length], [1, 1, 1]);
        assert.equal(samplingRequests[0].maxTokens, 50);
        assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}! Model: ${F.FIXTURE.client.samplingAnswer}. Roots received.`);
    });

    it('test_input_required_result_multi_round (legacy: two elicitation/create requests)', async () => {
        if (!HAS_ELICITATION) return expectNoElicitation('test_input_required_result_multi_round');
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_multi_round' });
        assert.deepEqual(elicitRequests.map(e => e.message), ['Step 1: What is your name?', 'Step 2: What is your favorite color?']);
        assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}! Your favorite color is ${F.FIXTURE.client.elicitString}.`);
    });

    it('interview: two questions in turn (legacy: two elicitation/create requests)', async () => {
        if (!HAS_ELICITATION) return expectNoElicitation('interview');
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'interview' });
        assert.deepEqual(elicitRequests.map(e => e.message), ['Who are you?', 'What do you do?']);
        assert.equal(F.onlyText(r), `Interviewed ${F.FIXTURE.client.elicitName}, ${F.FIXTURE.client.elicitString}`);
    });

    it('test_input_required_result_tampered_state (legacy: no requestState on the wire, so it just succeeds)', async () => {
        if (!HAS_ELICITATION) return expectNoElicitation('test_input_required_result_tampered_state');
        const r = await client.callTool({ name: 'test_input_required_result_tampered_state' });
        assert.equal(F.onlyText(r), `Verified state; hello, ${F.FIXTURE.client.elicitName}!`);
    });

    it('test_input_required_result_capabilities (asks only what initialize declared)', async () => {
        elicitRequests.length = 0; samplingRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_capabilities' });
        if (HAS_ELICITATION) {
            assert.equal(elicitRequests.length, 1);
            assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}!`);
        } else {
            assert.equal(samplingRequests.length, 1, 'without elicitation the tool must fall back to sampling');
            assert.equal(F.onlyText(r), `The model answered: ${F.FIXTURE.client.samplingAnswer}`);
        }
    });

    F.itReadsTheResources(() => client);
    F.itGetsThePrompts(() => client, 'legacy', { completionSkip: !HAS_AUDIO_AND_COMPLETIONS && `no completions at ${REVISION}` });

    it('get test_input_required_result_prompt (legacy: elicitation/create request)', async () => {
        if (!HAS_ELICITATION) {
            await assert.rejects(client.getPrompt({ name: 'test_input_required_result_prompt' }), 'must fail without elicitation');
            return;
        }
        elicitRequests.length = 0;
        const r = await client.getPrompt({ name: 'test_input_required_result_prompt' });
        assert.equal(elicitRequests.length, 1);
        assert.equal(elicitRequests[0].message, 'What context should the prompt use?');
        assert.deepEqual(r.messages.map(m => [m.role, F.textOf(m.content)]), [['user', `Prompt with user context: ${F.FIXTURE.client.elicitString}`]]);
    });

    // ---------- tasks: 2025-11-25's core tasks, through the SDK's experimental client ----------
    // Through the bridge (in front of the 2026-07-28 fixture) the tasks are the bridge's own,
    // waiting for the fixture's (docs/bridge.md).
    const HAS_TASKS = REVISION >= '2025-11-25';
    const NAME = F.FIXTURE.client.elicitName;

    /** Every message of a tool call streamed as a task. */
    async function asTask(name, args) {
        const seen = [];
        const stream = client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, { task: { ttl: 60000 } });
        for await (const message of stream) seen.push(message);
        return seen;
    }

    /** The created task and the final message of a streamed call. */
    function createdAndLast(seen) {
        assert.equal(seen[0]?.type, 'taskCreated', JSON.stringify(seen));
        return { task: seen[0].task, last: seen.at(-1) };
    }

    it('greet answers in the request, never as a task', async () => {
        assert.equal(F.onlyText(await client.callTool({ name: 'greet', arguments: { name: 'sdk1' } })), 'Hello, sdk1!');
    });

    it(`slow_compute ${HAS_TASKS ? 'as a task: created, polled to its result, listed' : 'in the request (no tasks before 2025-11-25)'}`, async () => {
        const args = { seconds: 0.2, label: 'sdk1' };
        if (!HAS_TASKS) {
            assert.equal(F.onlyText(await client.callTool({ name: 'slow_compute', arguments: args })), 'sdk1: done after 0.2 s');
            return;
        }
        const { task, last } = createdAndLast(await asTask('slow_compute', args));
        assert.equal(last.type, 'result', JSON.stringify(last));
        assert.equal(F.onlyText(last.result), 'sdk1: done after 0.2 s');
        assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'completed');
        const listed = await client.experimental.tasks.listTasks();
        assert.ok(listed.tasks.some(t => t.taskId === task.taskId), JSON.stringify(listed));
    });

    it(`confirm_delete asks through the elicitation handler${HAS_TASKS ? ', from inside its task' : ''}`, async () => {
        if (!HAS_ELICITATION) {
            await assert.rejects(client.callTool({ name: 'confirm_delete', arguments: { filename: 'a.txt' } }));
            return;
        }
        elicitRequests.length = 0;
        if (!HAS_TASKS) {
            assert.equal(F.onlyText(await client.callTool({ name: 'confirm_delete', arguments: { filename: 'a.txt' } })), 'Deleted a.txt.');
            return;
        }
        const { task, last } = createdAndLast(await asTask('confirm_delete', { filename: 'a.txt' }));
        assert.equal(last.type, 'result', JSON.stringify(last));
        assert.equal(F.onlyText(last.result), 'Deleted a.txt.');
        assert.equal(elicitRequests.length, 1);
        assert.equal(elicitRequests[0]._meta?.['io.modelcontextprotocol/related-task']?.taskId, task.taskId, 'the question names its task');
    });

    it('multi_input asks its two questions and answers with both replies', async () => {
        if (!HAS_ELICITATION) {
            await assert.rejects(client.callTool({ name: 'multi_input', arguments: {} }));
            return;
        }
        assert.equal(F.onlyText(await client.callTool({ name: 'multi_input', arguments: {} })), `Got ${NAME} and ${NAME}.`);
    });

    it(`failing_job and test_tool_with_task ${HAS_TASKS ? 'run as tasks' : 'run in the request'}`, async () => {
        if (!HAS_TASKS) {
            const failed = await client.callTool({ name: 'failing_job', arguments: {} });
            assert.equal(failed.isError, true);
            if (HAS_ELICITATION)
                assert.equal(F.onlyText(await client.callTool({ name: 'test_tool_with_task', arguments: {} })), `Hello, ${NAME}, from a task.`);
            else await assert.rejects(client.callTool({ name: 'test_tool_with_task', arguments: {} }));
            return;
        }
        const failing = createdAndLast(await asTask('failing_job', {}));
        assert.equal(failing.last.type, 'result', JSON.stringify(failing.last));
        assert.equal(failing.last.result.isError, true, 'a tool error is a completed task with isError');
        const greeted = createdAndLast(await asTask('test_tool_with_task', {}));
        assert.equal(F.onlyText(greeted.last.result), `Hello, ${NAME}, from a task.`);
    });

    it('protocol_error_job ends with a JSON-RPC error, not a result', async () => {
        if (!HAS_TASKS) {
            await assert.rejects(client.callTool({ name: 'protocol_error_job', arguments: {} }), e => e.code === -32603);
            return;
        }
        const { last } = createdAndLast(await asTask('protocol_error_job', {}));
        assert.equal(last.type, 'error', JSON.stringify(last));
        assert.equal(last.error.code, -32603, JSON.stringify(last));
    });

    (HAS_TASKS ? it : it.skip)('a running task is cancelled, and says so', async () => {
        const stream = client.experimental.tasks.callToolStream(
            { name: 'slow_compute', arguments: { seconds: 60, label: 'cancelled' } }, CallToolResultSchema, { task: { ttl: 60000 } });
        const first = await stream.next();
        assert.equal(first.value?.type, 'taskCreated', JSON.stringify(first.value));
        await stream.return();
        const cancelled = await client.experimental.tasks.cancelTask(first.value.task.taskId);
        assert.equal(cancelled.status, 'cancelled', JSON.stringify(cancelled));
        assert.equal((await client.experimental.tasks.getTask(first.value.task.taskId)).status, 'cancelled');
    });

    (HAS_TASKS && HAS_ELICITATION ? it : it.skip)('a client that runs elicitation as its own task is asked with one, polled, and its answer used', async () => {
        const asked = [];
        const store = new InMemoryTaskStore();
        const c = new Client({ name: 'droid-interop-ts-sdk1-client-tasks', version: '1.0.0' }, {
            capabilities: { elicitation: {}, tasks: { cancel: {}, requests: { elicitation: { create: {} } } } },
            taskStore: store
        });
        c.setRequestHandler(ElicitRequestSchema, async (req, extra) => {
            asked.push(req.params);
            const answer = { action: 'accept', content: F.fillElicitation(req.params.requestedSchema) };
            if (!req.params.task) return answer;
            // The person answers later: the task is working meanwhile.
            const task = await extra.taskStore.createTask({ ttl: req.params.task.ttl, pollInterval: 100 });
            setTimeout(() => extra.taskStore.storeTaskResult(task.taskId, 'completed', answer).catch(() => {}), 400);
            return { task };
        });
        const { t } = newTransport();
        const w = F.recordTransport(t);
        await c.connect(t);
        try {
            const r = await c.callTool({ name: 'test_elicitation', arguments: { message: 'asked as a task' } });
            assert.notEqual(r.isError, true, JSON.stringify(r));
            assert.equal(asked.length, 1, JSON.stringify(asked));
            assert.ok(asked[0].task?.ttl > 0, `the question asks for a task: ${JSON.stringify(asked[0])}`);
            const text = F.onlyText(r);
            assert.ok(text.startsWith('User response: action=accept'), text);
            assert.ok(text.includes(F.FIXTURE.client.elicitString) || text.includes(F.FIXTURE.client.elicitName), `answer not reflected: ${text}`);
            const polled = w.received.filter(m => m.method?.startsWith('tasks/')).map(m => m.method);
            assert.ok(polled.includes('tasks/get'), `the task was polled: ${JSON.stringify(polled)}`);
            assert.equal(polled.at(-1), 'tasks/result', `its answer was fetched: ${JSON.stringify(polled)}`);
        } finally {
            await c.close();
            store.cleanup();   // its TTL timers would keep the process alive
        }
    });

    F.itCallsEveryListedTool(() => client, () => wire, () => listedTools, []);
});
