// TypeScript SDK 1.x (@modelcontextprotocol/sdk 1.32.x) as a legacy-era client of `droid serve` over stdio.
//
// Revision: INTEROP_REVISION (default 2025-11-25, the SDK's LATEST_PROTOCOL_VERSION). The 1.x Client
// hard-codes LATEST_PROTOCOL_VERSION in its initialize request (no option exists), so for an older
// revision the recorded transport (F.recordTransport) rewrites `params.protocolVersion` of the outgoing `initialize`. The
// client itself accepts any version in its SUPPORTED_PROTOCOL_VERSIONS in the answer.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
    CallToolResultSchema,
    CreateMessageRequestSchema,
    ElicitRequestSchema,
    LoggingMessageNotificationSchema,
    LATEST_PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS
} from '@modelcontextprotocol/sdk/types.js';
import * as F from './common.mjs';

const REVISION = process.env.INTEROP_REVISION || LATEST_PROTOCOL_VERSION;
// Features that do not exist at older revisions are neither declared nor exercised there.
const HAS_ELICITATION = REVISION >= '2025-06-18';
const HAS_AUDIO_AND_COMPLETIONS = REVISION >= '2025-03-26';

describe(`TS SDK 1.x client, legacy era, protocolVersion ${REVISION}`, () => {
    let client;
    let transport;
    let wire;
    const samplingRequests = [];
    const elicitRequests = [];
    const logs = [];

    before(async () => {
        assert.ok(SUPPORTED_PROTOCOL_VERSIONS.includes(REVISION), `SDK 1.x cannot speak ${REVISION}`);
        client = new Client(
            { name: 'droid-interop-ts-sdk1', version: '1.0.0' },
            { capabilities: HAS_ELICITATION ? { sampling: {}, elicitation: {} } : { sampling: {} } }
        );
        client.setRequestHandler(CreateMessageRequestSchema, async req => {
            samplingRequests.push(req.params);
            return F.samplingAnswer();
        });
        if (HAS_ELICITATION) {
            client.setRequestHandler(ElicitRequestSchema, async req => {
                elicitRequests.push(req.params);
                return { action: 'accept', content: F.fillElicitation(req.params.requestedSchema) };
            });
        }
        client.setNotificationHandler(LoggingMessageNotificationSchema, n => {
            logs.push(n.params);
        });
        transport = new StdioClientTransport(F.stdioParams());
        wire = F.recordTransport(transport, m =>
            m.method === 'initialize' && REVISION !== LATEST_PROTOCOL_VERSION
                ? { ...m, params: { ...m.params, protocolVersion: REVISION } }
                : m
        );
        await client.connect(transport);
    });

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
    });

    it('test_simple_text', async () => F.assertSimpleText(await client.callTool({ name: 'test_simple_text' })));
    it('test_image_content', async () => F.assertImage(await client.callTool({ name: 'test_image_content' })));
    it('test_audio_content', { skip: !HAS_AUDIO_AND_COMPLETIONS && `no audio content at ${REVISION}` }, async () => F.assertAudio(await client.callTool({ name: 'test_audio_content' })));
    it('test_embedded_resource', async () => F.assertEmbedded(await client.callTool({ name: 'test_embedded_resource' })));
    it('test_multiple_content_types', async () => F.assertMixed(await client.callTool({ name: 'test_multiple_content_types' })));
    it('test_error_handling returns isError (not a protocol error)', async () =>
        F.assertToolError(await client.callTool({ name: 'test_error_handling' })));

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

    it('test_sampling goes through the client sampling handler', async () => {
        samplingRequests.length = 0;
        const r = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'interop sampling prompt' } });
        assert.notEqual(r.isError, true);
        assert.equal(samplingRequests.length, 1, 'exactly one sampling/createMessage');
        const m = samplingRequests[0].messages;
        assert.equal(m[0].role, 'user');
        assert.equal(m[0].content.text, 'interop sampling prompt');
        assert.equal(samplingRequests[0].maxTokens, 100);
        assert.equal(F.onlyText(r), `LLM response: ${F.FIXTURE.client.samplingAnswer}`);
    });

    it('test_elicitation goes through the client elicitation handler', { skip: !HAS_ELICITATION && `no elicitation at ${REVISION}` }, async () => {
        elicitRequests.length = 0;
        const r = await client.callTool({ name: 'test_elicitation', arguments: { message: 'interop elicitation message' } });
        assert.notEqual(r.isError, true);
        assert.equal(elicitRequests.length, 1, 'exactly one elicitation/create');
        assert.equal(elicitRequests[0].message, 'interop elicitation message');
        assert.equal(elicitRequests[0].requestedSchema?.type, 'object');
        const text = F.onlyText(r);
        assert.ok(text.startsWith('User response: action=accept'), text);
        assert.ok(text.includes(F.FIXTURE.client.elicitString) || text.includes(F.FIXTURE.client.elicitName), `answer not reflected: ${text}`);
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

    it('prompts/list', async () => F.assertPromptList((await client.listPrompts()).prompts, 'legacy'));
    it('get test_simple_prompt', async () => F.assertSimplePrompt(await client.getPrompt({ name: 'test_simple_prompt' })));
    it('get test_prompt_with_arguments', async () =>
        F.assertPromptWithArgs(
            await client.getPrompt({ name: 'test_prompt_with_arguments', arguments: { arg1: 'testValue1', arg2: 'testValue2' } })
        ));
    it('completion/complete on test_prompt_with_arguments arg1', { skip: !HAS_AUDIO_AND_COMPLETIONS && `no completions at ${REVISION}` }, async () =>
        F.assertCompletion(
            await client.complete({ ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' }, argument: { name: 'arg1', value: 'test' } })
        ));
});
