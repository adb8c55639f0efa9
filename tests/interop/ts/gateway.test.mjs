// `droid gateway` in front of npm's @modelcontextprotocol/server-everything (over stdio), with the
// official TypeScript SDK clients as its sessions: SDK 1.x in the legacy era (2025-11-25, Streamable
// HTTP with a session) and SDK 2.x pinned to 2026-07-28 (stateless HTTP).
//
// What the gateway carries besides tools, under its own names: prompts (`everything/…`, with
// arguments and a completion), resources and templates (`everything+demo://…`), a resource the
// upstream does not have as the client named it; the upstream's sampling and elicitation
// questions, answered by the calling client's handlers and never another client's; a long-running
// tool's progress; the upstream's task-only tool, as a task of the
// gateway's own for SDK 1.x and for SDK 2.x in its 'legacy' mode (through request(), with the
// upstream's question from inside the task), and in the request for SDK 2.x at 2026-07-28.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as Http1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as Client2, StreamableHTTPClientTransport as Http2 } from '@modelcontextprotocol/client';
import * as z from 'zod';
import * as F from './common.mjs';

const DROID = join(F.INTEROP_DIR, '..', '..', 'target', 'debug', 'droid');
const EVERYTHING = join(F.INTEROP_DIR, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const STATIC = 'everything+demo://resource/static/document/features.md';
const TEMPLATE = 'everything+demo://resource/dynamic/text/{resourceId}';

/** Whether the gateway is three instances sharing a Redis behind haproxy (`scaled.sh`), so
 * each request of a session lands on another instance. */
const SCALED = process.env.INTEROP_GATEWAY_SCALED === '1';

/** Starts the gateway on a free port; resolves with its URL once it listens. */
function startGateway() {
    const dir = mkdtempSync(join(tmpdir(), 'droid-gateway-ts-'));
    const config = join(dir, 'mcp.json');
    writeFileSync(config, JSON.stringify({ mcpServers: { everything: { command: 'node', args: [EVERYTHING, 'stdio'] } } }));
    const [command, args] = SCALED
        ? ['bash', [join(F.INTEROP_DIR, 'scaled.sh'), '--listen', '127.0.0.1:0']]
        : [DROID, ['gateway', '--config', config, '--listen', '127.0.0.1:0']];
    const child = spawn(command, args, {
        env: { ...process.env, XDG_STATE_HOME: join(dir, 'state'), SCALED_AS: 'gateway', SCALED_GATEWAY_CONFIG: config },
        stdio: ['ignore', 'ignore', 'pipe']
    });
    return new Promise((resolve, reject) => {
        let seen = '';
        const timer = setTimeout(() => reject(new Error(`the gateway did not listen:\n${seen}`)), 30000);
        child.stderr.on('data', chunk => {
            seen += chunk;
            const port = /listening on http:\/\/127\.0\.0\.1:(\d+)\/mcp/.exec(seen)?.[1];
            if (port) {
                clearTimeout(timer);
                resolve({ child, dir, url: new URL(`http://127.0.0.1:${port}/mcp`) });
            }
        });
        child.on('exit', code => {
            rmSync(dir, { recursive: true, force: true });
            reject(new Error(`the gateway exited (${code}):\n${seen}`));
        });
    });
}

/** A session of `era`: its client, and what its handlers were asked. */
async function session(url, era, name) {
    const asked = [];
    const capabilities = { sampling: {}, elicitation: {} };
    const sample = async req => {
        asked.push(['sampling', req.params]);
        return { model: 'interop-model', role: 'assistant', content: { type: 'text', text: `sampled by ${name}` }, stopReason: 'endTurn' };
    };
    const elicit = async req => {
        asked.push(['elicitation', req.params]);
        return { action: 'accept', content: { ...F.fillElicitation(req.params.requestedSchema), name } };
    };
    let client;
    if (era === 'legacy') {
        client = new Client1({ name: `ts-sdk1-${name}`, version: '1.0.0' }, { capabilities });
        client.setRequestHandler(CreateMessageRequestSchema, sample);
        client.setRequestHandler(ElicitRequestSchema, elicit);
        await client.connect(new Http1(url));
    } else {
        client = new Client2(
            { name: `ts-sdk2-${name}`, version: '2.0.0' },
            { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } }
        );
        client.setRequestHandler('sampling/createMessage', sample);
        client.setRequestHandler('elicitation/create', elicit);
        await client.connect(new Http2(url));
    }
    return { client, asked };
}

/** Every page of a list. */
async function all(list, member) {
    const items = [];
    let cursor;
    do {
        const page = await list(cursor ? { cursor } : undefined);
        items.push(...page[member]);
        cursor = page.nextCursor;
    } while (cursor);
    return items;
}

const text = r => r.content.filter(c => c.type === 'text').map(c => c.text).join('\n');

let gateway;
before(async () => {
    gateway = await startGateway();
});
after(async () => {
    if (!gateway) return;
    // The folder (config, state) goes once the gateway has stopped writing to it.
    const { child } = gateway;
    if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise(resolve => child.once('exit', resolve));
        child.kill();
        await exited;
    }
    rmSync(gateway.dir, { recursive: true, force: true });
});

for (const era of ['legacy', '2026-07-28']) {
    describe(`the gateway with TS SDK ${era === 'legacy' ? '1.x (2025-11-25)' : '2.x (2026-07-28)'} sessions`, () => {
        let alice;
        let bob;
        before(async () => {
            alice = await session(gateway.url, era, 'alice');
            bob = await session(gateway.url, era, 'bob');
        });
        after(async () => {
            await alice?.client.close();
            await bob?.client.close();
        });

        it('lists prompts under the gateway names, gets one with arguments and completes another', async () => {
            const prompts = (await all(c => alice.client.listPrompts(c), 'prompts')).map(p => p.name);
            assert.ok(prompts.includes('everything/args-prompt'), JSON.stringify(prompts));
            const got = await alice.client.getPrompt({ name: 'everything/args-prompt', arguments: { city: 'Lyon', state: 'Rhône' } });
            assert.match(got.messages[0].content.text, /Lyon/);
            const completed = await alice.client.complete({
                ref: { type: 'ref/prompt', name: 'everything/completable-prompt' },
                argument: { name: 'department', value: 'Eng' }
            });
            assert.deepEqual(completed.completion.values, ['Engineering']);
        });

        it("tells a prompt the upstream does not have in its own words, and passes on the upstream's refusal of one it has", async () => {
            // server-everything names its own prompt ("Prompt nope not found"); the gateway names
            // the client's, as it does for a prompt a caller may not see.
            await assert.rejects(alice.client.getPrompt({ name: 'everything/nope' }), error => {
                assert.equal(error.code, -32602, error.message);
                assert.match(error.message, /unknown prompt everything\/nope/);
                return true;
            });
            await assert.rejects(alice.client.getPrompt({ name: 'everything/args-prompt' }), error => {
                assert.equal(error.code, -32602, error.message);
                assert.doesNotMatch(error.message, /unknown prompt/);
                return true;
            });
        });

        it('lists and reads resources and templates under the gateway names', async () => {
            const uris = (await all(c => alice.client.listResources(c), 'resources')).map(r => r.uri);
            assert.ok(uris.includes(STATIC), JSON.stringify(uris));
            const read = await alice.client.readResource({ uri: STATIC });
            assert.equal(read.contents[0].uri, STATIC);
            const templates = (await alice.client.listResourceTemplates()).resourceTemplates.map(t => t.uriTemplate);
            assert.ok(templates.includes(TEMPLATE), JSON.stringify(templates));
            const uri = TEMPLATE.replace('{resourceId}', '5');
            const expanded = await alice.client.readResource({ uri });
            assert.equal(expanded.contents[0].uri, uri);
            assert.match(expanded.contents[0].text, /Resource 5/);
        });

        it('answers a resource its upstream does not have with the name the client asked for, at its revision', async () => {
            // server-everything says -32602 and names its own URI; the client hears of its own,
            // with -32002 at 2025-11-25 and -32602 at 2026-07-28, as for a prefix no upstream has.
            const code = era === 'legacy' ? -32002 : -32602;
            for (const uri of [STATIC.replace('features.md', 'missing.md'), 'nowhere+demo://resource/static/document/features.md']) {
                await assert.rejects(alice.client.readResource({ uri }), error => {
                    assert.equal(error.code, code, error.message);
                    assert.ok(error.message.includes(uri), error.message);
                    assert.equal(error.data?.uri, uri, JSON.stringify(error.data));
                    return true;
                });
            }
        });

        it("puts the upstream's sampling and elicitation to the calling session only", async () => {
            const sampled = await alice.client.callTool({ name: 'everything/trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 10 } });
            assert.ok(!sampled.isError && text(sampled).includes('sampled by alice'), text(sampled));
            const elicited = await alice.client.callTool({ name: 'everything/trigger-elicitation-request', arguments: {} });
            assert.ok(!elicited.isError && text(elicited).includes('alice'), text(elicited));
            assert.deepEqual(alice.asked.map(([kind]) => kind), ['sampling', 'elicitation']);
            assert.deepEqual(bob.asked, []);
        });

        it(era === 'legacy'
            ? "runs the upstream's task-only tool as a task of its own: created, then polled to its result"
            : "runs the upstream's task-only tool in the request for a client without the tasks extension", async () => {
            const name = 'everything/simulate-research-query';
            const args = { topic: `gateway ${era}`, ambiguous: false };
            if (era !== 'legacy') {
                const done = await alice.client.callTool({ name, arguments: args });
                assert.ok(!done.isError, text(done));
                assert.match(text(done), new RegExp(`Research Report: gateway ${era}`));
                // The client made no task: the upstream's, which the gateway waited for, is not named.
                assert.equal(done._meta?.['io.modelcontextprotocol/related-task'], undefined, JSON.stringify(done._meta));
                return;
            }
            // The upstream only runs it as a task; through the gateway it runs either way.
            const listed = (await all(c => alice.client.listTools(c), 'tools')).find(t => t.name === name);
            assert.equal(listed?.execution?.taskSupport, 'optional', JSON.stringify(listed));
            const seen = [];
            const stream = alice.client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, { task: { ttl: 60000 } });
            for await (const message of stream) seen.push(message);
            assert.equal(seen[0]?.type, 'taskCreated', JSON.stringify(seen));
            const last = seen.at(-1);
            assert.equal(last.type, 'result', JSON.stringify(last));
            assert.match(text(last.result), /Research Report: gateway legacy/);
            // Named as the gateway's own task, if at all; never as the upstream's.
            const related = last.result._meta?.['io.modelcontextprotocol/related-task'];
            assert.ok(related === undefined || related.taskId === seen[0].task.taskId, JSON.stringify(last.result._meta));
            const task = await alice.client.experimental.tasks.getTask(seen[0].task.taskId);
            assert.equal(task.status, 'completed');
        });

        it("carries a long-running tool's progress", async () => {
            const events = [];
            const done = await alice.client.callTool(
                { name: 'everything/trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
                ...(era === 'legacy' ? [undefined] : []),
                { onprogress: p => events.push(p.progress) }
            );
            assert.ok(!done.isError, text(done));
            assert.deepEqual(events, [1, 2, 3]);
        });
    });
}

// SDK 2.x runs no tasks itself, but in its 'legacy' mode its generic request() carries the
// 2025-11-25 task methods (sdk2.test.mjs): the upstream's task-only tool, as the gateway's own task,
// polled to its result, and its clarification asked from inside the task answered by this client.
describe("the gateway with a TS SDK 2.x session in 'legacy' mode: tasks through request()", () => {
    const Result = z.looseObject({});
    let carol;
    before(async () => {
        const asked = [];
        const client = new Client2({ name: 'ts-sdk2-carol', version: '2.0.0' }, { capabilities: { elicitation: {} }, versionNegotiation: { mode: 'legacy' } });
        client.setRequestHandler('elicitation/create', async req => {
            asked.push(req.params);
            return { action: 'accept', content: { ...F.fillElicitation(req.params.requestedSchema), interpretation: 'the history of tea' } };
        });
        await client.connect(new Http2(gateway.url));
        carol = { client, asked };
    });
    after(async () => {
        await carol?.client.close();
    });

    /** Calls the upstream's task-only tool as a task: the created task. */
    async function create(args) {
        const created = await carol.client.request({ method: 'tools/call', params: { name: 'everything/simulate-research-query', arguments: args, task: { ttl: 60000 } } }, Result);
        assert.equal(typeof created.task?.taskId, 'string', JSON.stringify(created));
        return created.task;
    }

    it('created, polled at its interval to completed, then its result', async () => {
        const task = await create({ topic: 'gateway sdk2', ambiguous: false });
        let seen = task;
        while (seen.status === 'working') {
            await new Promise(resolve => setTimeout(resolve, Math.min(seen.pollInterval ?? 100, 1000)));
            seen = await carol.client.request({ method: 'tasks/get', params: { taskId: task.taskId } }, Result);
        }
        assert.equal(seen.status, 'completed', JSON.stringify(seen));
        const result = await carol.client.request({ method: 'tasks/result', params: { taskId: task.taskId } }, Result);
        assert.match(text(result), /Research Report: gateway sdk2/);
    });

    it("the upstream's clarification, asked from inside the task, is answered by this client", async () => {
        const task = await create({ topic: 'leaves', ambiguous: true });
        const result = await carol.client.request({ method: 'tasks/result', params: { taskId: task.taskId } }, Result);
        assert.ok(!result.isError, JSON.stringify(result));
        assert.match(text(result), /the history of tea/);
        assert.equal(carol.asked.length, 1, JSON.stringify(carol.asked));
        assert.equal(carol.asked[0]._meta?.['io.modelcontextprotocol/related-task']?.taskId, task.taskId, JSON.stringify(carol.asked[0]));
    });
});
