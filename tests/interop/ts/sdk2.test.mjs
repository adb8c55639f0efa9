// TypeScript SDK 2.x client (@modelcontextprotocol/client 2.4.x) pinned to the stateless 2026-07-28
// revision: `versionNegotiation: { mode: { pin: '2026-07-28' } }`.
//
// With the SDK's base StdioClientTransport, connect() first spawns a short-lived *sibling* server
// process, sends it `server/discover` (the only message that process gets), SIGTERMs it, and only
// then spawns the session process, which receives per-request `_meta` traffic with no
// initialize and (unless discover() is called) no server/discover. Pin mode fails unless the
// discover result offers 2026-07-28.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import * as F from './common.mjs';

const REVISION = '2026-07-28';

function newClient(mode, samplingRequests = [], elicitRequests = []) {
    const client = new Client(
        { name: 'droid-interop-ts-sdk2', version: '2.0.0' },
        { capabilities: { sampling: {}, elicitation: {} }, versionNegotiation: { mode } }
    );
    client.setRequestHandler('sampling/createMessage', async req => {
        samplingRequests.push(req.params);
        return F.samplingAnswer();
    });
    client.setRequestHandler('elicitation/create', async req => {
        elicitRequests.push(req.params);
        return { action: 'accept', content: F.fillElicitation(req.params.requestedSchema) };
    });
    return client;
}

describe(`TS SDK 2.x client, pinned ${REVISION}`, () => {
    let client;
    let wire;
    const samplingRequests = [];
    const elicitRequests = [];

    before(async () => {
        client = newClient({ pin: REVISION }, samplingRequests, elicitRequests);
        const transport = new StdioClientTransport(F.stdioParams());
        wire = F.recordTransport(transport);
        await client.connect(transport);
    });

    after(async () => {
        await client?.close();
    });

    it('connect-time server/discover (sibling probe) selected the modern era', () => {
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
    });

    it('test_simple_text', async () => F.assertSimpleText(await client.callTool({ name: 'test_simple_text' })));
    it('test_image_content', async () => F.assertImage(await client.callTool({ name: 'test_image_content' })));
    it('test_audio_content', async () => F.assertAudio(await client.callTool({ name: 'test_audio_content' })));
    it('test_embedded_resource', async () => F.assertEmbedded(await client.callTool({ name: 'test_embedded_resource' })));
    it('test_multiple_content_types', async () => F.assertMixed(await client.callTool({ name: 'test_multiple_content_types' })));
    it('test_error_handling returns isError (not a protocol error)', async () =>
        F.assertToolError(await client.callTool({ name: 'test_error_handling' })));

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

    it('resources/list and resources/templates/list', async () => {
        const { resources } = await client.listResources();
        const { resourceTemplates } = await client.listResourceTemplates();
        F.assertResourceList(resources, resourceTemplates);
    });
    it('read test://static-text', async () => F.assertStaticText(await client.readResource({ uri: 'test://static-text' })));
    it('read test://static-binary', async () => F.assertStaticBinary(await client.readResource({ uri: 'test://static-binary' })));
    it('read test://template/123/data', async () =>
        F.assertTemplate(await client.readResource({ uri: 'test://template/123/data' })));

    it('prompts/list', async () => F.assertPromptList((await client.listPrompts()).prompts, 'modern'));
    it('get test_simple_prompt', async () => F.assertSimplePrompt(await client.getPrompt({ name: 'test_simple_prompt' })));
    it('get test_prompt_with_arguments', async () =>
        F.assertPromptWithArgs(
            await client.getPrompt({ name: 'test_prompt_with_arguments', arguments: { arg1: 'testValue1', arg2: 'testValue2' } })
        ));
    it('completion/complete on test_prompt_with_arguments arg1', async () =>
        F.assertCompletion(
            await client.complete({ ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' }, argument: { name: 'arg1', value: 'test' } })
        ));
});

describe(`TS SDK 2.x client, versionNegotiation 'auto'`, () => {
    it('auto mode negotiates the modern era', async () => {
        const client = newClient('auto');
        try {
            await client.connect(new StdioClientTransport(F.stdioParams()));
            assert.equal(client.getProtocolEra(), 'modern', 'a dual-era server should be detected as modern');
            assert.equal(client.getNegotiatedProtocolVersion(), REVISION);
            F.assertSimpleText(await client.callTool({ name: 'test_simple_text' }));
        } finally {
            await client.close();
        }
    });
});
