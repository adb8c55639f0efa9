// TypeScript SDK 2.x client (@modelcontextprotocol/client 2.4.x) pinned to the stateless 2026-07-28
// revision: `versionNegotiation: { mode: { pin: '2026-07-28' } }`.
//
// With the SDK's base StdioClientTransport, connect() first spawns a short-lived *sibling* server
// process, sends it `server/discover` (the only message that process gets), SIGTERMs it, and only
// then spawns the session process, which receives per-request `_meta` traffic with no
// initialize and (unless discover() is called) no server/discover. Pin mode fails unless the
// discover result offers 2026-07-28.
//
// Transport: INTEROP_TRANSPORT (F.TRANSPORT). `stdio` (default) as above; `http` uses the SDK's
// StreamableHTTPClientTransport against INTEROP_HTTP_URL (stateless 2026-07-28 POSTs to /mcp; there is no
// sibling process, the connect-time probe goes over the same transport), with a recording fetch.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, LOG_LEVEL_META_KEY, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import * as z from 'zod';
import * as F from './common.mjs';

const REVISION = '2026-07-28';

/** A fresh client transport of the kind INTEROP_TRANSPORT selects, and its HTTP log (empty on stdio). */
function newTransport() {
    if (F.TRANSPORT === 'http') {
        const fetch = F.recordingFetch();
        return { t: new StreamableHTTPClientTransport(F.httpUrl('/mcp'), { fetch }), http: fetch.log };
    }
    return { t: new StdioClientTransport(F.stdioParams()), http: [] };
}

function newClient(mode, samplingRequests = [], elicitRequests = [], rec = {}, capabilities = { sampling: {}, elicitation: {}, roots: {} }) {
    const client = new Client(
        { name: 'droid-interop-ts-sdk2', version: '2.0.0' },
        { capabilities, versionNegotiation: { mode } }
    );
    if (capabilities.sampling)
        client.setRequestHandler('sampling/createMessage', async req => {
            samplingRequests.push(req.params);
            return F.samplingAnswer();
        });
    if (capabilities.elicitation)
        client.setRequestHandler('elicitation/create', async req => {
            elicitRequests.push(req.params);
            return { action: 'accept', content: F.fillElicitation(req.params.requestedSchema) };
        });
    if (capabilities.roots)
        client.setRequestHandler('roots/list', async () => {
            (rec.roots ??= []).push(1);
            return { roots: F.ROOTS };
        });
    client.setNotificationHandler('notifications/message', n => (rec.logs ??= []).push(n.params));
    client.setNotificationHandler('notifications/tools/list_changed', n => (rec.changed ??= []).push(['tools', n.params]));
    client.setNotificationHandler('notifications/prompts/list_changed', n => (rec.changed ??= []).push(['prompts', n.params]));
    return client;
}

describe(`TS SDK 2.x client, pinned ${REVISION}, transport ${F.TRANSPORT}`, () => {
    let client;
    let wire;
    let http = [];
    const samplingRequests = [];
    const elicitRequests = [];
    const rec = { roots: [], logs: [], changed: [] };
    let listedTools = [];
    let tamper = false;   // when set, the MRTR retry's requestState is altered on the way out

    before(async () => {
        client = newClient({ pin: REVISION }, samplingRequests, elicitRequests, rec);
        const { t: transport, http: h } = newTransport();
        http = h;
        wire = F.recordTransport(transport, m => {
            if (tamper && m.method === 'tools/call' && typeof m.params?.requestState === 'string') {
                const st = m.params.requestState;
                const flipped = (st[st.length - 1] === 'A' ? 'B' : 'A');
                return { ...m, params: { ...m.params, requestState: st.slice(0, -1) + flipped } };
            }
            return m;
        });
        await client.connect(transport);
    });

    after(async () => {
        await client?.close();
    });

    it(`connect-time server/discover (${F.TRANSPORT === 'stdio' ? 'sibling probe' : 'probe POST'}) selected the modern era`, () => {
        assert.notEqual(wire.sent[0]?.method, 'initialize', 'no initialize on the session process');
        assert.equal(client.getProtocolEra(), 'modern');
        assert.equal(client.getNegotiatedProtocolVersion(), REVISION);
        const d = client.getDiscoverResult();
        assert.ok(d, 'no DiscoverResult recorded');
        assert.ok(d.supportedVersions.includes(REVISION), `supportedVersions ${JSON.stringify(d.supportedVersions)}`);
        for (const c of ['tools', 'resources', 'prompts']) assert.ok(d.capabilities?.[c], `discover capabilities lack ${c}`);
    });

    it('server/discover on the session process', async () => {
        const d = await client.discover();
        assert.ok(d.supportedVersions.includes(REVISION));
        assert.ok(d.capabilities?.tools, 'capabilities.tools missing');
        const info = client.getServerVersion();
        assert.ok(info?.name, `serverInfo should be in discover _meta (got ${JSON.stringify(d._meta)})`);
    });

    it('tools/list has every 2026 fixture tool with description and inputSchema', async () => {
        const { tools } = await client.listTools();
        F.assertToolList(tools, 'modern');
        listedTools = tools.map(t => t.name);
    });

    F.itCallsTheContentTools(() => client);

    it('test_tool_with_progress emits progress 0/50/100 (progressToken in request _meta)', async () => {
        const events = [];
        const r = await client.callTool({ name: 'test_tool_with_progress' }, { onprogress: p => events.push(p) });
        F.assertProgress(r, events, wire);
    });

    it('test_input_required_result_elicitation: SDK drives the MRTR retry', async () => {
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_elicitation' });
        assert.notEqual(r.isError, true);
        assert.equal(elicitRequests.length, 1, 'elicitation handler called once');
        assert.equal(elicitRequests[0].message, 'What is your name?');
        assert.deepEqual(elicitRequests[0].requestedSchema.required, ['name']);
        assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}!`);
    });

    it('test_input_required_result_sampling: SDK drives the MRTR retry', async () => {
        samplingRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_sampling' });
        assert.notEqual(r.isError, true);
        assert.equal(samplingRequests.length, 1, 'sampling handler called once');
        assert.equal(samplingRequests[0].messages[0].content.text, 'What is the capital of France?');
        assert.equal(samplingRequests[0].maxTokens, 100);
        const text = F.onlyText(r);
        assert.ok(text.includes(F.FIXTURE.client.samplingAnswer), `sampling answer not reflected: ${text}`);
    });

    // ---- the rest of the tools tools/list returns (2026 era: every client question is an input_required round) ----

    /** The request ids on the wire for calls of `name` since `from`, and whether any server->client request arrived. */
    function callsOf(name, from) {
        return wire.sent.slice(from).filter(m => m.method === 'tools/call' && m.params?.name === name);
    }
    function noServerRequests(from) {
        const reqs = wire.received.slice(from).filter(m => m.method && 'id' in m);
        assert.deepEqual(reqs, [], 'no server-to-client requests on a 2026-07-28 connection');
    }

    it('test_sampling (MRTR round)', async () => {
        samplingRequests.length = 0;
        const r = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'interop sampling prompt' } });
        assert.equal(samplingRequests.length, 1);
        assert.equal(samplingRequests[0].messages[0].content.text, 'interop sampling prompt');
        assert.equal(samplingRequests[0].maxTokens, 100);
        assert.equal(F.onlyText(r), `LLM response: ${F.FIXTURE.client.samplingAnswer}`);
    });

    it('test_elicitation (MRTR round)', async () => {
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'test_elicitation', arguments: { message: 'interop elicitation message' } });
        assert.equal(elicitRequests.length, 1);
        assert.equal(elicitRequests[0].message, 'interop elicitation message');
        const text = F.onlyText(r);
        assert.ok(text.startsWith('User response: action=accept'), text);
        assert.deepEqual(F.jsonAfter(text, 'User response: action=accept, content='), F.fillElicitation(elicitRequests[0].requestedSchema));
    });

    for (const name of ['test_elicitation_sep1034_defaults', 'test_elicitation_sep1330_enums']) {
        const check = name.endsWith('defaults') ? F.assertDefaultsSchema : F.assertEnumsSchema;
        it(`${name}: the client receives the schema and the tool reflects the answer`, async () => {
            elicitRequests.length = 0;
            const r = await client.callTool({ name });
            assert.equal(elicitRequests.length, 1, 'exactly one elicitation');
            check(elicitRequests[0]);
            F.assertElicitationCompleted(r, elicitRequests[0]);
        });
    }

    it(`test_reconnection (${F.TRANSPORT}, 2026-07-28: just answers)`, async () =>
        assert.equal(F.onlyText(await client.callTool({ name: 'test_reconnection' })), 'Reconnection test completed'));

    it(`test_x_mcp_header: answers with the region it was given${F.TRANSPORT === 'http' ? ' (Mcp-Param-Region mirrored)' : ''}`, async () => {
        const from = http.length;
        assert.equal(F.onlyText(await client.callTool({ name: 'test_x_mcp_header', arguments: { region: 'eu-west' } })), 'Region: eu-west');
        if (F.TRANSPORT !== 'http') return;
        const post = http.slice(from).find(e => e.method === 'POST' && e.body?.params?.name === 'test_x_mcp_header');
        assert.deepEqual([post?.headers['mcp-method'], post?.headers['mcp-name'], post?.headers['mcp-param-region'], post?.headers['mcp-protocol-version']],
            ['tools/call', 'test_x_mcp_header', 'eu-west', REVISION], JSON.stringify(post?.headers));
        assert.equal(post.headers['mcp-session-id'], undefined, 'no session at 2026-07-28');
    });

    it('test_missing_capability: succeeds when _meta clientCapabilities declare sampling', async () =>
        assert.equal(F.onlyText(await client.callTool({ name: 'test_missing_capability' })), 'The client declared sampling.'));

    it('test_missing_capability: -32021 {requiredCapabilities:{sampling:{}}} from a client without sampling', async () => {
        const other = newClient({ pin: REVISION }, [], [], {}, { elicitation: {} });
        const { t } = newTransport();
        const w = F.recordTransport(t);
        await other.connect(t);
        try {
            await assert.rejects(other.callTool({ name: 'test_missing_capability' }), e => {
                assert.equal(e.code, -32021, `code ${e.code}: ${e.message}`);
                assert.deepEqual(e.data?.requiredCapabilities, { sampling: {} });
                return true;
            });
            const sent = w.sent.find(m => m.method === 'tools/call');
            assert.equal(sent.params._meta['io.modelcontextprotocol/clientCapabilities'].sampling, undefined);
            const err = w.received.find(m => m.id === sent.id);
            assert.equal(err.error?.code, -32021, JSON.stringify(err));
        } finally {
            await other.close();
        }
    });

    it('test_logging_tool: a log notification only when _meta asks for a log level', async () => {
        rec.logs.length = 0;
        assert.equal(F.onlyText(await client.callTool({ name: 'test_logging_tool' })), 'Logging tool completed');
        const sentNoLevel = callsOf('test_logging_tool', 0).at(-1);
        assert.equal(sentNoLevel.params._meta?.[LOG_LEVEL_META_KEY], undefined);
        assert.deepEqual(rec.logs, [], 'no notifications/message without io.modelcontextprotocol/logLevel');
        const r = await client.callTool({ name: 'test_logging_tool', _meta: { [LOG_LEVEL_META_KEY]: 'info' } });
        assert.equal(F.onlyText(r), 'Logging tool completed');
        assert.equal(callsOf('test_logging_tool', 0).at(-1).params._meta?.[LOG_LEVEL_META_KEY], 'info');
        await F.waitFor(() => rec.logs.length >= 1, 1000, 'notifications/message');
        assert.deepEqual(rec.logs.map(l => [l.level, l.data]), [['info', 'Logging tool executed']]);
    });

    it('test_tool_with_logging with _meta logLevel debug: the three info messages', async () => {
        rec.logs.length = 0;
        const r = await client.callTool({ name: 'test_tool_with_logging', _meta: { [LOG_LEVEL_META_KEY]: 'debug' } });
        assert.equal(F.onlyText(r), 'Tool with logging executed successfully');
        await F.waitFor(() => rec.logs.length >= 3, 1000, 'three notifications/message');
        assert.deepEqual(rec.logs.filter(l => l.level === 'info').map(l => l.data), F.FIXTURE.texts.logMessages);
    });

    it('test_streaming_elicitation: only notifications, then the result', async () => {
        const from = wire.received.length;
        rec.logs.length = 0;
        const r = await client.callTool({ name: 'test_streaming_elicitation', _meta: { [LOG_LEVEL_META_KEY]: 'info' } }, { onprogress: () => {} });
        assert.equal(F.onlyText(r), 'Streaming completed');
        const req = callsOf('test_streaming_elicitation', 0).at(-1);
        const got = wire.received.slice(from);
        const respAt = got.findIndex(m => m.id === req.id && ('result' in m || 'error' in m));
        const before = got.slice(0, respAt);
        noServerRequests(from);
        const progress = before.filter(m => m.method === 'notifications/progress' && m.params.progressToken === req.params._meta.progressToken);
        assert.deepEqual(progress.map(m => [m.params.progress, m.params.total, m.params.message]),
            [[0, 100, 'streaming'], [50, 100, 'streaming'], [100, 100, 'streaming']]);
        assert.deepEqual(before.filter(m => m.method === 'notifications/message').map(m => m.params.data), ['step 0', 'step 50', 'step 100']);
    });

    for (const [name, kind, filter, text] of [
        ['test_trigger_tool_change', 'tools', { toolsListChanged: true }, 'Tool list change triggered'],
        ['test_trigger_prompt_change', 'prompts', { promptsListChanged: true }, 'Prompt list change triggered']
    ]) {
        it(`${name}: succeeds, and notifications/${kind}/list_changed arrives on a subscriptions/listen stream`, async () => {
            const sub = await client.listen(filter);
            try {
                rec.changed.length = 0;
                assert.equal(F.onlyText(await client.callTool({ name })), text);
                await F.waitFor(() => rec.changed.some(([k]) => k === kind), 2000, `notifications/${kind}/list_changed on the listen stream`);
                const listen = wire.sent.filter(m => m.method === 'subscriptions/listen').at(-1);
                const ack = wire.received.filter(m => m.method === 'notifications/subscriptions/acknowledged').at(-1);
                const subId = ack?.params?._meta?.['io.modelcontextprotocol/subscriptionId'];
                assert.ok(listen && subId !== undefined, 'listen request and its acknowledgement with a subscriptionId');
                const n = wire.received.filter(m => m.method === `notifications/${kind}/list_changed`).at(-1);
                assert.equal(n.params?._meta?.['io.modelcontextprotocol/subscriptionId'], subId, 'list_changed is tagged with the subscription id');
            } finally {
                await sub.close();
            }
        });
    }

    it('test_input_required_result_list_roots: SDK answers roots/list in an MRTR round', async () => {
        rec.roots.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_list_roots' });
        assert.equal(rec.roots.length, 1);
        F.assertRootsText(r);
    });

    it('test_input_required_result_request_state: requestState echoed, text has state-ok', async () => {
        const from = wire.sent.length;
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_request_state' });
        assert.equal(elicitRequests.length, 1);
        assert.equal(elicitRequests[0].message, 'Please confirm');
        const text = F.onlyText(r);
        assert.ok(text.includes('state-ok'), text);
        assert.equal(text, 'state-ok: confirmed={"ok":true}');
        const calls = callsOf('test_input_required_result_request_state', from);
        assert.equal(calls.length, 2, 'one input_required round then the retry');
        assert.equal(typeof calls[1].params.requestState, 'string');
        assert.ok(calls[1].params.inputResponses?.confirm, 'retry carries inputResponses.confirm');
    });

    it('test_input_required_result_multiple_inputs: three questions in one round', async () => {
        elicitRequests.length = 0; samplingRequests.length = 0; rec.roots.length = 0;
        const from = wire.sent.length;
        const r = await client.callTool({ name: 'test_input_required_result_multiple_inputs' });
        assert.deepEqual([elicitRequests.length, samplingRequests.length, rec.roots.length], [1, 1, 1]);
        assert.equal(samplingRequests[0].maxTokens, 50);
        assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}! Model: ${F.FIXTURE.client.samplingAnswer}. Roots received.`);
        const calls = callsOf('test_input_required_result_multiple_inputs', from);
        assert.equal(calls.length, 2);
        assert.deepEqual(Object.keys(calls[1].params.inputResponses).sort(), ['client_roots', 'greeting', 'user_name']);
    });

    it('test_input_required_result_multi_round: two rounds', async () => {
        elicitRequests.length = 0;
        const from = wire.sent.length;
        const r = await client.callTool({ name: 'test_input_required_result_multi_round' });
        assert.deepEqual(elicitRequests.map(e => e.message), ['Step 1: What is your name?', 'Step 2: What is your favorite color?']);
        assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}! Your favorite color is ${F.FIXTURE.client.elicitString}.`);
        assert.equal(callsOf('test_input_required_result_multi_round', from).length, 3, 'two input_required rounds then the result');
    });

    it('interview: two questions in turn, two rounds', async () => {
        elicitRequests.length = 0;
        const from = wire.sent.length;
        const r = await client.callTool({ name: 'interview' });
        assert.deepEqual(elicitRequests.map(e => e.message), ['Who are you?', 'What do you do?']);
        assert.equal(F.onlyText(r), `Interviewed ${F.FIXTURE.client.elicitName}, ${F.FIXTURE.client.elicitString}`);
        assert.equal(callsOf('interview', from).length, 3, 'two input_required rounds then the result');
    });

    it('test_input_required_result_tampered_state: untouched state succeeds', async () => {
        const r = await client.callTool({ name: 'test_input_required_result_tampered_state' });
        assert.equal(F.onlyText(r), `Verified state; hello, ${F.FIXTURE.client.elicitName}!`);
    });

    it('test_input_required_result_tampered_state: a tampered requestState is rejected with -32602', async () => {
        tamper = true;
        try {
            await assert.rejects(client.callTool({ name: 'test_input_required_result_tampered_state' }), e => {
                assert.equal(e.code, -32602, `code ${e.code}: ${e.message}`);
                return true;
            });
        } finally {
            tamper = false;
        }
        const retry = callsOf('test_input_required_result_tampered_state', 0).at(-1);
        assert.equal(typeof retry.params.requestState, 'string', 'the tampered retry was sent');
    });

    it('test_input_required_result_capabilities: asks what _meta clientCapabilities declare (elicitation)', async () => {
        elicitRequests.length = 0; samplingRequests.length = 0;
        const r = await client.callTool({ name: 'test_input_required_result_capabilities' });
        assert.deepEqual([elicitRequests.length, samplingRequests.length], [1, 0]);
        assert.equal(F.onlyText(r), `Hello, ${F.FIXTURE.client.elicitName}!`);
    });

    F.itReadsTheResources(() => client);
    F.itGetsThePrompts(() => client, 'modern');

    it('get test_input_required_result_prompt (MRTR through prompts/get)', async () => {
        elicitRequests.length = 0;
        const from = wire.sent.length;
        const r = await client.getPrompt({ name: 'test_input_required_result_prompt' });
        assert.equal(elicitRequests.length, 1);
        assert.equal(elicitRequests[0].message, 'What context should the prompt use?');
        assert.deepEqual(r.messages.map(m => [m.role, F.textOf(m.content)]), [['user', `Prompt with user context: ${F.FIXTURE.client.elicitString}`]]);
        const gets = wire.sent.slice(from).filter(m => m.method === 'prompts/get');
        assert.equal(gets.length, 2);
        assert.ok(gets[1].params.inputResponses?.user_context, 'retry carries inputResponses.user_context');
    });

    // The fixture's task tools, with no tasks extension declared (the 2.x SDK has no task
    // runtime): each runs in the request, and a tool that only runs as a task is refused.
    it(`task tools without the tasks extension: in the request${F.BRIDGED ? '' : ', or -32021'}`, async () => {
        const name = F.FIXTURE.client.elicitName;
        assert.equal(F.onlyText(await client.callTool({ name: 'greet', arguments: { name: 'sdk2' } })), 'Hello, sdk2!');
        const computed = await client.callTool({ name: 'slow_compute', arguments: { seconds: 0.1, label: 'sdk2' } });
        assert.equal(F.onlyText(computed), 'sdk2: done after 0.1 s');
        assert.equal(computed.taskId, undefined, 'never a task without the extension');
        assert.equal(F.onlyText(await client.callTool({ name: 'confirm_delete', arguments: { filename: 'a.txt' } })), 'Deleted a.txt.');
        assert.equal(F.onlyText(await client.callTool({ name: 'multi_input', arguments: {} })), `Got ${name} and ${name}.`);
        await assert.rejects(client.callTool({ name: 'protocol_error_job', arguments: {} }), e => e.code === -32603);
        if (F.BRIDGED) {
            // Behind the bridge they are a 2025-11-25 server's task-only tools, which the bridge
            // runs in the request, waiting for the server's task itself.
            const failed = await client.callTool({ name: 'failing_job', arguments: {} });
            assert.equal(failed.isError, true);
            const hello = await client.callTool({ name: 'test_tool_with_task', arguments: {} });
            assert.equal(F.onlyText(hello), `Hello, ${name}, from a task.`);
            // The client made no task: the server's, which the bridge waited for, is not named.
            assert.equal(hello._meta?.['io.modelcontextprotocol/related-task'], undefined, JSON.stringify(hello._meta));
            return;
        }
        for (const tool of ['failing_job', 'test_tool_with_task'])
            await assert.rejects(client.callTool({ name: tool, arguments: {} }), e => {
                assert.equal(e.code, -32021, `${tool}: ${e.message}`);
                assert.ok(e.data?.requiredCapabilities?.extensions?.['io.modelcontextprotocol/tasks'], JSON.stringify(e.data));
                return true;
            });
    });

    F.itCallsEveryListedTool(() => client, () => wire, () => listedTools);
});

describe(`TS SDK 2.x client, versionNegotiation 'auto'`, () => {
    it('auto mode negotiates the modern era', async () => {
        const client = newClient('auto');
        try {
            await client.connect(newTransport().t);
            assert.equal(client.getProtocolEra(), 'modern', 'a dual-era server should be detected as modern');
            assert.equal(client.getNegotiatedProtocolVersion(), REVISION);
            F.assertSimpleText(await client.callTool({ name: 'test_simple_text' }));
        } finally {
            await client.close();
        }
    });
});

// Tasks from a 2.x client. The SDK keeps the 2025-11-25 task vocabulary importable but runs no
// tasks itself, and it refuses a 2026-07-28 `resultType: "task"` ("Unsupported result type").
// In 'legacy' mode its generic request() carries the 2025-11-25 task methods: the client here
// creates a task, polls it at the server's interval, answers a question asked from inside it,
// reads its result and cancels one, as an application on this SDK would.
describe(`TS SDK 2.x client, 'legacy' mode (2025-11-25), tasks through request(), transport ${F.TRANSPORT}`, () => {
    const Result = z.looseObject({});
    let client;
    const elicitRequests = [];

    before(async () => {
        client = newClient('legacy', [], elicitRequests);
        await client.connect(newTransport().t);
        assert.equal(client.getNegotiatedProtocolVersion(), '2025-11-25');
        assert.ok(client.getServerCapabilities()?.tasks?.requests?.tools?.call, JSON.stringify(client.getServerCapabilities()));
    });

    after(async () => {
        await client?.close();
    });

    /** Calls `name` as a task: the created task. */
    async function create(name, args) {
        const created = await client.request({ method: 'tools/call', params: { name, arguments: args, task: { ttl: 60000 } } }, Result);
        assert.equal(typeof created.task?.taskId, 'string', JSON.stringify(created));
        assert.equal(created.content, undefined, 'a task, not the result');
        return created.task;
    }

    /** Polls `task` at its interval until it leaves `working`: its last status. */
    async function poll(task) {
        for (let seen = task; ; ) {
            if (seen.status !== 'working') return seen;
            await new Promise(resolve => setTimeout(resolve, Math.min(seen.pollInterval ?? 100, 1000)));
            seen = await client.request({ method: 'tasks/get', params: { taskId: task.taskId } }, Result);
        }
    }

    it('slow_compute: created, polled to completed, its result tagged with the task, listed', async () => {
        const task = await create('slow_compute', { seconds: 0.3, label: 'sdk2-legacy' });
        assert.equal(task.status, 'working');
        assert.equal((await poll(task)).status, 'completed');
        const result = await client.request({ method: 'tasks/result', params: { taskId: task.taskId } }, Result);
        assert.equal(F.onlyText(result), 'sdk2-legacy: done after 0.3 s');
        assert.equal(result._meta?.['io.modelcontextprotocol/related-task']?.taskId, task.taskId, JSON.stringify(result._meta));
        const listed = await client.request({ method: 'tasks/list', params: {} }, Result);
        assert.ok(listed.tasks.some(t => t.taskId === task.taskId && t.status === 'completed'), JSON.stringify(listed));
    });

    it("confirm_delete: its question reaches the client's elicitation handler, tagged, and the answer ends the task", async () => {
        elicitRequests.length = 0;
        const task = await create('confirm_delete', { filename: 'b.txt' });
        // tasks/result waits for the end, and the question travels meanwhile.
        const result = await client.request({ method: 'tasks/result', params: { taskId: task.taskId } }, Result);
        assert.equal(F.onlyText(result), 'Deleted b.txt.');
        assert.equal(elicitRequests.length, 1, JSON.stringify(elicitRequests));
        assert.equal(elicitRequests[0]._meta?.['io.modelcontextprotocol/related-task']?.taskId, task.taskId, JSON.stringify(elicitRequests[0]));
        assert.equal((await client.request({ method: 'tasks/get', params: { taskId: task.taskId } }, Result)).status, 'completed');
    });

    it('failing_job: a tool error is a completed task whose result has isError', async () => {
        const task = await create('failing_job', {});
        const result = await client.request({ method: 'tasks/result', params: { taskId: task.taskId } }, Result);
        assert.equal(result.isError, true, JSON.stringify(result));
        assert.equal((await poll(task)).status, 'completed');
    });

    it('a running task is cancelled, and stays cancelled', async () => {
        const task = await create('slow_compute', { seconds: 60, label: 'cancelled' });
        const cancelled = await client.request({ method: 'tasks/cancel', params: { taskId: task.taskId } }, Result);
        assert.equal(cancelled.status, 'cancelled', JSON.stringify(cancelled));
        assert.equal((await client.request({ method: 'tasks/get', params: { taskId: task.taskId } }, Result)).status, 'cancelled');
        await assert.rejects(client.request({ method: 'tasks/cancel', params: { taskId: task.taskId } }, Result), e => e.code === -32602);
    });

    it('an unknown task id is -32602', async () => {
        await assert.rejects(client.request({ method: 'tasks/get', params: { taskId: 'no-such-task' } }, Result), e => e.code === -32602);
    });
});
