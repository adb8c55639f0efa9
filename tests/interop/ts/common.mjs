// Shared helpers for the TypeScript SDK drivers (SDK 1.x and 2.x).
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { it } from 'node:test';

const here = dirname(fileURLToPath(import.meta.url));
export const INTEROP_DIR = join(here, '..');
export const FIXTURE = JSON.parse(readFileSync(join(INTEROP_DIR, 'fixture.json'), 'utf8'));

/** DROID_SERVER_CMD split on whitespace -> { command, args }. */
export function serverCommand() {
    const raw = process.env.DROID_SERVER_CMD;
    if (!raw || !raw.trim()) throw new Error('DROID_SERVER_CMD is not set (e.g. "/work/main/target/debug/droid serve")');
    const [command, ...args] = raw.trim().split(/\s+/);
    return { command, args };
}

/** Stdio spawn parameters: full environment (the SDKs default to a minimal one), server stderr passed through. */
export function stdioParams() {
    const { command, args } = serverCommand();
    const env = {};
    for (const [k, v] of Object.entries(process.env)) if (typeof v === 'string') env[k] = v;
    return { command, args, env, stderr: 'inherit' };
}

// ---------- transports: INTEROP_TRANSPORT=stdio (default) | http | sse ----------

/** Which transport the driver uses: `stdio` (spawn DROID_SERVER_CMD), `http` (Streamable HTTP) or `sse` (2024-11-05 HTTP+SSE). */
export const TRANSPORT = process.env.INTEROP_TRANSPORT || 'stdio';
/** Whether the server under test is `droid bridge` in front of the fixture (run.sh's bridged.sh). */
export const BRIDGED = /bridged\.sh$/.test(process.env.DROID_SERVER_CMD ?? '');
export const IS_HTTP = TRANSPORT === 'http' || TRANSPORT === 'sse';

/** The Streamable HTTP endpoint of the server run.sh started (INTEROP_HTTP_URL, e.g. http://127.0.0.1:PORT/mcp). */
export function httpUrl(path = '/mcp') {
    const raw = process.env.INTEROP_HTTP_URL;
    if (!raw) throw new Error('INTEROP_HTTP_URL is not set (run.sh starts `droid serve --listen 127.0.0.1:0` and sets it)');
    const u = new URL(raw);
    u.pathname = path;
    return u;
}

/**
 * A `fetch` that records every HTTP exchange the SDK transport makes: method, lower-cased request headers,
 * parsed JSON body, response status and content type, and (teed, so the SDK reads the same bytes) the full
 * text of every `text/event-stream` response body. `log.done(entry)` resolves when that body has ended.
 */
export function recordingFetch() {
    const log = [];
    const f = async (url, init = {}) => {
        const headers = {};
        new Headers(init.headers ?? {}).forEach((v, k) => (headers[k] = v));
        let body;
        if (typeof init.body === 'string') {
            try { body = JSON.parse(init.body); } catch { body = init.body; }
        }
        let ended;
        const entry = { method: (init.method ?? 'GET').toUpperCase(), url: String(url), headers, body, status: undefined, contentType: undefined, sse: '',
            ended: new Promise(r => (ended = r)) };   // resolves once the status is known and any event-stream body has ended
        log.push(entry);
        let response;
        try {
            response = await fetch(url, init);
        } catch (e) {
            entry.fetchError = String(e);
            ended();
            throw e;
        }
        entry.status = response.status;
        entry.contentType = response.headers.get('content-type') ?? '';
        if (!response.body || !entry.contentType.includes('text/event-stream')) {
            ended();
            return response;
        }
        const [mine, theirs] = response.body.tee();
        (async () => {
            const reader = mine.pipeThrough(new TextDecoderStream()).getReader();
            try {
                for (;;) {
                    const { value, done } = await reader.read();
                    if (done) break;
                    entry.sse += value;
                }
            } catch (e) {
                entry.sseError = String(e);
            }
        })().finally(ended);
        return new Response(theirs, { status: response.status, statusText: response.statusText, headers: response.headers });
    };
    f.log = log;
    return f;
}

/** Parse an SSE body into events [{ id, event, data, retry }] (blank-line separated; multi-line data joined). */
export function parseSse(text) {
    const events = [];
    for (const block of text.replace(/\r\n?/g, '\n').split(/\n\n+/)) {
        if (!block.trim()) continue;
        const ev = { id: undefined, event: undefined, data: undefined, retry: undefined };
        for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue;
            const i = line.indexOf(':');
            const field = i < 0 ? line : line.slice(0, i);
            const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
            if (field === 'data') ev.data = ev.data === undefined ? value : `${ev.data}\n${value}`;
            else if (field === 'id') ev.id = value;
            else if (field === 'event') ev.event = value;
            else if (field === 'retry') ev.retry = Number(value);
        }
        events.push(ev);
    }
    return events;
}

/** The JSON-RPC messages carried by an SSE body (events with non-empty data). */
export function sseMessages(text) {
    return parseSse(text).filter(e => e.data).map(e => JSON.parse(e.data));
}

/**
 * Proof that a tools/call of `name` was answered through resumption, from a recordingFetch log:
 *  - the POST carrying the call got an event stream holding a priming event (an id, empty data, `retry:`)
 *    and no response for the call before the server closed it;
 *  - afterwards the client sent GET /mcp with `Last-Event-ID` equal to that priming id (same session);
 *  - that GET's stream carried the call's result.
 * Returns { post, get, priming, result } for further checks.
 */
export async function assertResumed(log, name) {
    const post = log.filter(e => e.method === 'POST' && e.body?.method === 'tools/call' && e.body?.params?.name === name).at(-1);
    assert.ok(post, `no POST of tools/call ${name} recorded`);
    await post.ended;
    assert.equal(post.status, 200, `POST status ${post.status}`);
    assert.match(post.contentType, /text\/event-stream/, 'the call must be answered with an event stream');
    const postEvents = parseSse(post.sse);
    const priming = postEvents.find(e => e.id !== undefined && !e.data);
    assert.ok(priming, `no priming event (id, empty data) on the POST stream: ${JSON.stringify(post.sse)}`);
    assert.equal(priming.retry, 500, `priming event retry: ${JSON.stringify(post.sse)}`);
    const answeredOnPost = sseMessages(post.sse).some(m => m.id === post.body.id && ('result' in m || 'error' in m));
    assert.equal(answeredOnPost, false, 'the POST stream must close without the response (otherwise no resumption is needed)');
    const at = log.indexOf(post);
    const get = log.slice(at + 1).find(e => e.method === 'GET' && e.headers['last-event-id'] !== undefined);
    assert.ok(get, `no GET with Last-Event-ID after the POST (requests: ${log.slice(at).map(e => `${e.method} ${JSON.stringify(e.headers['last-event-id'] ?? null)}`).join(', ')})`);
    assert.equal(get.headers['last-event-id'], priming.id, 'Last-Event-ID must name the priming event');
    assert.equal(get.headers['mcp-session-id'], post.headers['mcp-session-id'], 'the GET must resume in the same session');
    assert.equal(get.status, 200, `resumption GET status ${get.status}`);
    await get.ended;
    const result = sseMessages(get.sse).find(m => m.id === post.body.id && 'result' in m);
    assert.ok(result, `the resumed GET stream did not carry the result for id ${post.body.id}: ${JSON.stringify(get.sse)}`);
    assert.deepEqual(result.result.content, [{ type: 'text', text: 'Reconnection test completed' }]);
    return { post, get, priming, result };
}

/**
 * Legacy Streamable HTTP: the server-to-client `method` request for a tools/call of `name` travelled on that
 * POST's event stream (before its response), and the client answered it with a POST of the JSON-RPC response.
 */
export async function assertBackChannel(log, name, method) {
    const post = log.filter(e => e.method === 'POST' && e.body?.method === 'tools/call' && e.body?.params?.name === name).at(-1);
    assert.ok(post, `no POST of tools/call ${name} recorded`);
    await post.ended;
    assert.match(post.contentType, /text\/event-stream/, `${name}: the call must be answered with an event stream`);
    const msgs = F_sseMessages(post.sse);
    const reqAt = msgs.findIndex(m => m.method === method && 'id' in m);
    const respAt = msgs.findIndex(m => m.id === post.body.id && ('result' in m || 'error' in m));
    assert.ok(reqAt >= 0, `${name}: no ${method} request on the POST stream: ${JSON.stringify(msgs.map(m => m.method ?? m.id))}`);
    assert.ok(respAt > reqAt, `${name}: the tool result must follow the ${method} request on the same stream`);
    const answer = log.find(e => e.method === 'POST' && e.body?.id === msgs[reqAt].id && 'result' in (e.body ?? {}) && !e.body.method);
    assert.ok(answer, `${name}: the client's answer to ${method} was not POSTed`);
    assert.equal(answer.headers['mcp-session-id'], post.headers['mcp-session-id']);
    await answer.ended;
    assert.equal(answer.status, 202, `the answer POST got ${answer.status}`);
}
const F_sseMessages = text => sseMessages(text);

/**
 * Record a transport's wire traffic by patching the *instance* (not subclassing: the 2.x client only
 * uses its disposable sibling probe for the exact base StdioClientTransport class). `rewrite` may
 * replace outgoing messages.
 */
export function recordTransport(transport, rewrite = m => m) {
    const wire = { sent: [], received: [] };
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
        message = rewrite(message);
        wire.sent.push(message);
        return send(message, options);
    };
    let handler;
    Object.defineProperty(transport, 'onmessage', {
        configurable: true,
        get: () => handler,
        set: h => {
            handler = h && (msg => {
                wire.received.push(msg);
                h(msg);
            });
        }
    });
    return wire;
}

/** Fill an elicitation form from its requestedSchema with deterministic values the checks can look for. */
export function fillElicitation(requestedSchema) {
    const content = {};
    for (const [key, prop] of Object.entries(requestedSchema?.properties ?? {})) {
        if (Array.isArray(prop.enum) && prop.enum.length) content[key] = prop.enum[0];
        else if (Array.isArray(prop.oneOf) && prop.oneOf.length && 'const' in prop.oneOf[0]) content[key] = prop.oneOf[0].const;
        else if (prop.type === 'string') content[key] = key === 'name' ? FIXTURE.client.elicitName : FIXTURE.client.elicitString;
        else if (prop.type === 'integer' || prop.type === 'number') content[key] = 42;
        else if (prop.type === 'boolean') content[key] = true;
        else if (prop.type === 'array') {
            const items = prop.items ?? {};
            if (Array.isArray(items.enum) && items.enum.length) content[key] = [items.enum[0]];
            else if (Array.isArray(items.anyOf) && items.anyOf.length && 'const' in items.anyOf[0]) content[key] = [items.anyOf[0].const];
            else content[key] = [];
        }
    }
    return content;
}

export function samplingAnswer() {
    return { model: 'interop-model', role: 'assistant', content: { type: 'text', text: FIXTURE.client.samplingAnswer }, stopReason: 'endTurn' };
}

/** The text of a text content block; fails on any other block type. */
export function textOf(block) {
    assert.equal(block?.type, 'text', `expected a text block, got ${JSON.stringify(block)}`);
    return block.text;
}

/** The single text block of a tool result. */
export function onlyText(r) {
    assert.equal(r.content.length, 1, `expected one content block, got ${JSON.stringify(r.content)}`);
    return textOf(r.content[0]);
}

/** The single content block of a tool result that is not an error. */
export function onlyBlock(r) {
    assert.notEqual(r.isError, true);
    assert.equal(r.content.length, 1);
    return r.content[0];
}

/** The single entry of a resources/read result. */
export function onlyContent(r) {
    assert.equal(r.contents.length, 1);
    return r.contents[0];
}

// ---------- content checks shared by both TS drivers (same expectations as CONFORMANCE.md §5) ----------

export function assertToolList(tools, era) {
    const byName = new Map(tools.map(t => [t.name, t]));
    const missing = FIXTURE.tools[era].filter(n => !byName.has(n));
    assert.deepEqual(missing, [], `tools/list is missing fixture tools: ${missing.join(', ')}`);
    for (const name of FIXTURE.tools[era]) {
        const t = byName.get(name);
        assert.ok(typeof t.description === 'string' && t.description.length > 0, `${name}: empty or missing description`);
        assert.ok(t.inputSchema && t.inputSchema.type === 'object', `${name}: inputSchema missing or not type object`);
    }
    for (const t of tools) assert.match(t.name, /^[A-Za-z0-9_./-]{1,64}$/, `invalid tool name ${t.name}`);
}

/** `droid serve`'s tools beyond the conformance fixture; `listed` is the tools/list result. */
export async function assertExtraTools(client, listed) {
    const byName = Object.fromEntries(listed.map(t => [t.name, t]));
    for (const name of ['echo', 'add', 'delete_note', 'sleep']) {
        if (!byName[name]) return `the server under test has no ${name} tool`;
    }
    assert.equal(onlyText(await client.callTool({ name: 'echo', arguments: { text: 'héllo' } })), 'héllo');
    assert.equal(onlyText(await client.callTool({ name: 'add', arguments: { a: 2, b: 3.5 } })), '5.5');
    assert.equal(byName.delete_note.annotations?.destructiveHint, true);
    assert.equal(onlyText(await client.callTool({ name: 'delete_note', arguments: { id: '7' } })), 'Deleted note 7.');
    assert.equal(onlyText(await client.callTool({ name: 'sleep', arguments: { ms: 1 } })), 'Slept 1 ms.');
    return null;
}

export function assertSimpleText(r) {
    assert.notEqual(r.isError, true);
    assert.deepEqual(r.content.map(textOf), [FIXTURE.texts.simple]);
}

export function assertImage(r) {
    const c = onlyBlock(r);
    assert.equal(c.type, 'image');
    assert.equal(c.mimeType, 'image/png');
    assert.equal(c.data, FIXTURE.png);
}

export function assertAudio(r) {
    const c = onlyBlock(r);
    assert.equal(c.type, 'audio');
    assert.equal(c.mimeType, 'audio/wav');
    assert.equal(c.data, FIXTURE.wav);
}

export function assertEmbedded(r) {
    const c = onlyBlock(r);
    assert.equal(c.type, 'resource');
    const res = c.resource;
    assert.equal(res.uri, 'test://embedded-resource');
    assert.equal(res.mimeType, 'text/plain');
    assert.equal(res.text, FIXTURE.texts.embedded);
}

export function assertMixed(r) {
    assert.notEqual(r.isError, true);
    assert.equal(r.content.length, 3, 'expected text, image and resource');
    const [text, image, resource] = r.content;
    assert.equal(textOf(text), FIXTURE.texts.mixedHeader);
    assert.equal(image.type, 'image');
    assert.equal(image.mimeType, 'image/png');
    assert.equal(image.data, FIXTURE.png);
    assert.equal(resource.type, 'resource');
    assert.equal(resource.resource.uri, 'test://mixed-content-resource');
    assert.equal(resource.resource.mimeType, 'application/json');
    // JSON-equal (whitespace-insensitive) to {"test":"data","value":123}
    assert.deepEqual(JSON.parse(resource.resource.text), JSON.parse(FIXTURE.texts.mixedResource));
}

export function assertToolError(r) {
    assert.equal(r.isError, true, 'test_error_handling must return isError: true');
    assert.equal(r.content.length, 1);
    assert.equal(r.content[0].type, 'text');
    assert.equal(r.content[0].text, FIXTURE.texts.error);
}

/**
 * Progress is judged on the wire: >= 3 non-decreasing notifications 0/50/100 of 100 for the call's
 * token, all before the response. The SDK callback must have seen at least one. (Both TS SDKs run
 * notification handlers in a microtask but responses synchronously, so a progress notification that
 * arrives in the same stdout read as the response is silently dropped by the client.)
 */
export function assertProgress(r, events, wire) {
    assert.notEqual(r.isError, true);
    const req = wire.sent.filter(m => m.method === 'tools/call' && m.params?.name === 'test_tool_with_progress').at(-1);
    const token = req?.params?._meta?.progressToken;
    assert.notEqual(token, undefined, 'client sent no progressToken');
    const respAt = wire.received.findIndex(m => m.id === req.id && ('result' in m || 'error' in m));
    const onWire = wire.received
        .map((m, i) => [m, i])
        .filter(([m]) => m.method === 'notifications/progress' && m.params?.progressToken === token);
    const progress = onWire.map(([m]) => m.params);
    assert.ok(progress.length >= 3, `expected >= 3 progress notifications on the wire, got ${JSON.stringify(progress)}`);
    assert.ok(onWire.every(([, i]) => i < respAt), 'progress notifications must precede the response');
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress >= progress[i - 1].progress, 'progress must not decrease');
    assert.deepEqual(progress.slice(0, 3).map(e => [e.progress, e.total]), [[0, 100], [50, 100], [100, 100]]);
    assert.ok(events.length >= 1, 'the SDK progress callback saw no notification');
    if (events.length < progress.length)
        console.log(`# note: SDK delivered ${events.length}/${progress.length} progress notifications to onprogress (client-side race)`);
}

export function assertResourceList(resources, templates) {
    const uris = resources.map(r => r.uri);
    for (const uri of FIXTURE.resources) assert.ok(uris.includes(uri), `resources/list lacks ${uri} (got ${uris.join(', ')})`);
    for (const r of resources) assert.ok(typeof r.name === 'string' && r.name.length > 0, `resource ${r.uri} has no name`);
    const tpls = templates.map(t => t.uriTemplate);
    for (const t of FIXTURE.resourceTemplates) assert.ok(tpls.includes(t), `resources/templates/list lacks ${t} (got ${tpls.join(', ')})`);
}

export function assertStaticText(r) {
    const c = onlyContent(r);
    assert.equal(c.uri, 'test://static-text');
    assert.equal(c.mimeType, 'text/plain');
    assert.equal(c.text, FIXTURE.texts.staticText);
}

export function assertStaticBinary(r) {
    const c = onlyContent(r);
    assert.equal(c.uri, 'test://static-binary');
    assert.equal(c.mimeType, 'image/png');
    assert.equal(c.blob, FIXTURE.png);
}

export function assertTemplate(r) {
    const c = onlyContent(r);
    assert.equal(c.uri, 'test://template/123/data');
    assert.equal(c.mimeType, 'application/json');
    assert.deepEqual(JSON.parse(c.text), JSON.parse(FIXTURE.texts.template123));
}

export function assertPromptList(prompts, era) {
    const names = prompts.map(p => p.name);
    for (const n of FIXTURE.prompts[era]) assert.ok(names.includes(n), `prompts/list lacks ${n} (got ${names.join(', ')})`);
    for (const p of prompts) assert.ok(typeof p.description === 'string' && p.description.length > 0, `prompt ${p.name} has no description`);
    const withArgs = prompts.find(p => p.name === 'test_prompt_with_arguments');
    const args = Object.fromEntries((withArgs.arguments ?? []).map(a => [a.name, a]));
    assert.ok(args.arg1?.required && args.arg2?.required, 'test_prompt_with_arguments must declare required arg1 and arg2');
}

export function assertSimplePrompt(r) {
    assert.deepEqual(r.messages.map(m => [m.role, textOf(m.content)]), [['user', FIXTURE.texts.simplePrompt]]);
}

export function assertPromptWithArgs(r) {
    assert.deepEqual(r.messages.map(m => [m.role, textOf(m.content)]), [['user', FIXTURE.texts.promptWithArgs]]);
}

export function assertCompletion(r) {
    assert.ok(r.completion && Array.isArray(r.completion.values), 'completion.values must be an array');
    for (const v of r.completion.values) assert.equal(typeof v, 'string');
}

// ---------- checks for the rest of the fixture tools (every tool tools/list returns is called) ----------

/** The roots every driver's roots/list handler answers with. */
export const ROOTS = [{ uri: 'file:///tmp/droid-interop-root', name: 'interop-root' }];

/** Valid arguments for json_schema_2020_12_tool (contactMethod email => email required; additionalProperties false). */
export const JSON_SCHEMA_ARGS = { name: 'Interop', address: { street: '1 Main St', city: 'Springfield' }, contactMethod: 'email', email: 'interop@example.com' };

/** Parse the JSON that follows `prefix` in `text` (the fixture formats results as "<prefix><json>"). */
export function jsonAfter(text, prefix) {
    assert.ok(text.startsWith(prefix), `expected text starting with ${JSON.stringify(prefix)}, got ${JSON.stringify(text)}`);
    return JSON.parse(text.slice(prefix.length));
}

/** tools/list must carry json_schema_2020_12_tool's raw 2020-12 inputSchema verbatim. */
export function assertJsonSchema2020(tools) {
    const t = tools.find(x => x.name === 'json_schema_2020_12_tool');
    assert.ok(t, 'json_schema_2020_12_tool not listed');
    const s = t.inputSchema;
    assert.equal(s.$schema, 'https://json-schema.org/draft/2020-12/schema');
    assert.deepEqual(s.$defs, { address: { $anchor: 'addressDef', type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } });
    assert.deepEqual(s.properties.address, { $ref: '#/$defs/address' });
    assert.deepEqual(s.properties.contactMethod, { type: 'string', enum: ['phone', 'email'] });
    for (const k of ['name', 'phone', 'email']) assert.deepEqual(s.properties[k], { type: 'string' });
    assert.deepEqual(s.allOf, [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }]);
    assert.deepEqual(s.if, { properties: { contactMethod: { const: 'phone' } } });
    assert.deepEqual(s.then, { required: ['phone'] });
    assert.deepEqual(s.else, { required: ['email'] });
    assert.equal(s.additionalProperties, false);
}

export function assertJsonSchemaCall(r) {
    assert.notEqual(r.isError, true, JSON.stringify(r));
    assert.deepEqual(jsonAfter(onlyText(r), 'Received: '), JSON_SCHEMA_ARGS);
}

/** SEP-1034: the requestedSchema the client received carries every default. */
export function assertDefaultsSchema(params) {
    assert.equal(params.message, 'Please review and update the form fields with defaults');
    const p = params.requestedSchema?.properties ?? {};
    assert.deepEqual(Object.keys(p).sort(), ['age', 'name', 'score', 'status', 'verified']);
    assert.deepEqual([p.name.type, p.name.default], ['string', 'John Doe']);
    assert.deepEqual([p.age.type, p.age.default], ['integer', 30]);
    assert.deepEqual([p.score.type, p.score.default], ['number', 95.5]);
    assert.deepEqual([p.status.type, p.status.enum, p.status.default], ['string', ['active', 'inactive', 'pending'], 'active']);
    assert.deepEqual([p.verified.type, p.verified.default], ['boolean', true]);
}

/** SEP-1330: the requestedSchema the client received carries all five enum forms. */
export function assertEnumsSchema(params) {
    assert.equal(params.message, 'Please select options from the enum fields');
    const p = params.requestedSchema?.properties ?? {};
    assert.deepEqual(Object.keys(p).sort(), ['legacyEnum', 'titledMulti', 'titledSingle', 'untitledMulti', 'untitledSingle']);
    assert.deepEqual([p.untitledSingle.type, p.untitledSingle.enum], ['string', ['option1', 'option2', 'option3']]);
    assert.equal(p.titledSingle.type, 'string');
    assert.deepEqual(p.titledSingle.oneOf, [
        { const: 'value1', title: 'First Option' }, { const: 'value2', title: 'Second Option' }, { const: 'value3', title: 'Third Option' }]);
    assert.deepEqual([p.legacyEnum.type, p.legacyEnum.enum, p.legacyEnum.enumNames],
        ['string', ['opt1', 'opt2', 'opt3'], ['Option One', 'Option Two', 'Option Three']]);
    assert.deepEqual([p.untitledMulti.type, p.untitledMulti.items], ['array', { type: 'string', enum: ['option1', 'option2', 'option3'] }]);
    assert.equal(p.titledMulti.type, 'array');
    assert.deepEqual(p.titledMulti.items, { anyOf: [
        { const: 'value1', title: 'First Choice' }, { const: 'value2', title: 'Second Choice' }, { const: 'value3', title: 'Third Choice' }] });
}

/** "Elicitation completed: action=accept, content=<the content the handler sent>" */
export function assertElicitationCompleted(r, params) {
    assert.notEqual(r.isError, true, JSON.stringify(r));
    const text = onlyText(r);
    assert.deepEqual(jsonAfter(text, 'Elicitation completed: action=accept, content='), fillElicitation(params.requestedSchema));
}

export function assertRootsText(r) {
    assert.notEqual(r.isError, true, JSON.stringify(r));
    assert.deepEqual(jsonAfter(onlyText(r), 'Client roots: '), ROOTS);
}

/** The call must fail: a JSON-RPC error (rejection) or an isError result. Returns a description. */
export async function expectFailure(call) {
    let r;
    try {
        r = await call();
    } catch (e) {
        return `JSON-RPC error ${e.code}: ${e.message}`;
    }
    assert.equal(r.isError, true, `expected the call to fail, got ${JSON.stringify(r)}`);
    return `isError: ${JSON.stringify(r.content)}`;
}

/** Wait until pred() holds (polling), or fail after ms. */
export async function waitFor(pred, ms, what) {
    const end = Date.now() + ms;
    while (!pred()) {
        if (Date.now() > end) assert.fail(`timed out after ${ms} ms waiting for ${what}`);
        await new Promise(r => setTimeout(r, 10));
    }
}

/** All tool names a driver calls; the driver asserts that this covers tools/list. */
export function assertCoversAll(listed, called, skipped = []) {
    const missing = listed.filter(n => !called.has(n) && !skipped.includes(n));
    assert.deepEqual(missing, [], `tools listed but never called: ${missing.join(', ')}`);
}

// ---------- tests both drivers register alike ----------
// Both SDKs' Client classes make these calls the same way (callTool with only a name and
// arguments, listTools, listResources, listResourceTemplates, readResource, listPrompts,
// getPrompt, complete), so each test is written once and registered by both drivers inside
// their describe. Calls with options stay in the drivers: 1.x takes a result schema before
// them. `client()` is read when a test runs, after the driver's before() connected.

/** json_schema_2020_12_tool, then the fixture's content tools; `audioSkip` says why audio is not tested, if it is not. */
export function itCallsTheContentTools(client, { audioSkip = false } = {}) {
    it('json_schema_2020_12_tool: raw 2020-12 inputSchema in tools/list, and a valid call', async () => {
        assertJsonSchema2020((await client().listTools()).tools);
        assertJsonSchemaCall(await client().callTool({ name: 'json_schema_2020_12_tool', arguments: JSON_SCHEMA_ARGS }));
    });
    it('test_simple_text', async () => assertSimpleText(await client().callTool({ name: 'test_simple_text' })));
    it('test_image_content', async () => assertImage(await client().callTool({ name: 'test_image_content' })));
    it('test_audio_content', { skip: audioSkip }, async () => assertAudio(await client().callTool({ name: 'test_audio_content' })));
    it('test_embedded_resource', async () => assertEmbedded(await client().callTool({ name: 'test_embedded_resource' })));
    it('test_multiple_content_types', async () => assertMixed(await client().callTool({ name: 'test_multiple_content_types' })));
    it('test_error_handling returns isError (not a protocol error)', async () =>
        assertToolError(await client().callTool({ name: 'test_error_handling' })));
}

/** The fixture's resource and template lists, and a read of each kind of resource. */
export function itReadsTheResources(client) {
    it('resources/list and resources/templates/list', async () => {
        const { resources } = await client().listResources();
        const { resourceTemplates } = await client().listResourceTemplates();
        assertResourceList(resources, resourceTemplates);
    });
    it('read test://static-text', async () => assertStaticText(await client().readResource({ uri: 'test://static-text' })));
    it('read test://static-binary', async () => assertStaticBinary(await client().readResource({ uri: 'test://static-binary' })));
    it('read test://template/123/data', async () =>
        assertTemplate(await client().readResource({ uri: 'test://template/123/data' })));
}

/** The prompts that ask the client nothing, `era`'s prompt list; `completionSkip` says why completion is not tested, if it is not. */
export function itGetsThePrompts(client, era, { completionSkip = false } = {}) {
    it('prompts/list', async () => assertPromptList((await client().listPrompts()).prompts, era));
    it('get test_simple_prompt', async () => assertSimplePrompt(await client().getPrompt({ name: 'test_simple_prompt' })));
    it('get test_prompt_with_arguments', async () =>
        assertPromptWithArgs(
            await client().getPrompt({ name: 'test_prompt_with_arguments', arguments: { arg1: 'testValue1', arg2: 'testValue2' } })
        ));
    it('completion/complete on test_prompt_with_arguments arg1', { skip: completionSkip }, async () =>
        assertCompletion(
            await client().complete({ ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' }, argument: { name: 'arg1', value: 'test' } })
        ));
    it('get test_prompt_with_embedded_resource', async () => {
        const r = await client().getPrompt({ name: 'test_prompt_with_embedded_resource', arguments: { resourceUri: 'test://example-resource' } });
        assert.deepEqual(r.messages.map(m => m.content.type), ['resource', 'text']);
        assert.deepEqual(r.messages[0].content.resource, { uri: 'test://example-resource', mimeType: 'text/plain', text: 'Embedded resource content for testing.' });
        assert.equal(r.messages[1].content.text, 'Please process the embedded resource above.');
    });
    it('get test_prompt_with_image', async () => {
        const r = await client().getPrompt({ name: 'test_prompt_with_image' });
        assert.deepEqual(r.messages.map(m => [m.content.type, m.content.mimeType ?? null, m.content.data ?? m.content.text]),
            [['image', 'image/png', FIXTURE.png], ['text', null, 'Please analyze the image above.']]);
    });
}

/**
 * A driver's last tests: `droid serve`'s tools beyond the fixture, then that every tool in
 * `listed()` (what tools/list returned) was called on `wire()` (the main client's recorded traffic).
 */
export function itCallsEveryListedTool(client, wire, listed, unreached = []) {
    it('the tools beyond the conformance fixture', async (t) => {
        const skipped = await assertExtraTools(client(), (await client().listTools()).tools);
        if (skipped) t.skip(skipped);
    });
    it('every tool tools/list returned was called', () => {
        const called = new Set(wire().sent.filter(m => m.method === 'tools/call').map(m => m.params.name));
        assertCoversAll(listed(), called, unreached);
    });
}
