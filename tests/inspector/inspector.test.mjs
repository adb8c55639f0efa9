// The MCP Inspector's command line (npm @modelcontextprotocol/inspector, pinned in package-lock.json),
// the tool people reach for to poke a server, against `droid serve`, `droid gateway` and
// `droid bridge`: over stdio, over Streamable HTTP and over 2024-11-05 HTTP+SSE. Each check runs
// the CLI as a user would (`mcp-inspector --cli ... --method ...`) and reads the JSON it prints.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const DROID = process.env.DROID_BIN;
const CLI = path.join(here, 'node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js');

/**
 * Runs the Inspector's CLI against `target` (a URL and its options, or `--` and a server's command
 * line) with `args`: the JSON it printed. A URL comes first (`--tool-arg` takes every word after
 * it); a command line comes last, so one with a `--` of its own (`droid bridge -- ...`) is passed
 * on whole.
 */
function inspect(target, args) {
    const words = target[0] === '--' ? [...args, ...target] : [...target, ...args];
    return new Promise((resolve, reject) => {
        execFile(process.execPath, [CLI, '--cli', ...words], { timeout: 60_000, maxBuffer: 16 << 20 },
            (error, stdout, stderr) => {
                if (error) return reject(new Error(`${error.message}\n${stdout}\n${stderr}`));
                try { resolve(JSON.parse(stdout)); } catch (e) { reject(new Error(`not JSON: ${stdout}\n${stderr}`)); }
            });
    });
}

/** The text of a tool result's first block. */
const text = result => result.content?.[0]?.text;

/** Starts `droid ARGS --listen 127.0.0.1:0`: the process and its base URL. */
async function listening(args) {
    const child = spawn(DROID, [...args, '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'] });
    const lines = createInterface({ input: child.stderr });
    const base = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => { child.kill(); reject(new Error('never listened')); }, 30_000);
        lines.on('line', line => {
            const found = line.match(/listening on (http:\/\/[^/\s]+)\//);
            if (found) { clearTimeout(timer); resolve(found[1]); }
        });
        child.on('exit', code => reject(new Error(`droid exited with ${code} before listening`)));
    });
    return { child, base };
}

describe('MCP Inspector CLI against droid serve over stdio', () => {
    const server = ['--', DROID, 'serve'];
    it('lists the tools and calls one', async () => {
        const listed = await inspect(server, ['--method', 'tools/list']);
        assert.ok(listed.tools.some(t => t.name === 'echo'), JSON.stringify(listed).slice(0, 300));
        const called = await inspect(server, ['--method', 'tools/call', '--tool-name', 'echo',
            '--tool-arg', 'text=hello from the inspector']);
        assert.equal(text(called), 'hello from the inspector');
    });
    it('reads a resource and gets a prompt', async () => {
        const read = await inspect(server, ['--method', 'resources/read', '--uri', 'test://static-text']);
        assert.equal(read.contents[0].uri, 'test://static-text');
        assert.equal(typeof read.contents[0].text, 'string');
        const prompt = await inspect(server, ['--method', 'prompts/get', '--prompt-name', 'test_simple_prompt']);
        assert.ok(prompt.messages.length > 0, JSON.stringify(prompt));
    });
});

describe('MCP Inspector CLI against droid gateway (its embedded default)', () => {
    it('over stdio: the namespaced catalog, and a call through it', async () => {
        const gateway = ['--', DROID, 'gateway'];
        const listed = await inspect(gateway, ['--method', 'tools/list']);
        assert.ok(listed.tools.some(t => t.name === 'fixture/echo'), JSON.stringify(listed).slice(0, 300));
        const sum = await inspect(gateway, ['--method', 'tools/call', '--tool-name', 'fixture/add',
            '--tool-arg', 'a=2', '--tool-arg', 'b=3']);
        assert.match(text(sum), /\b5\b/);
    });

    let gateway;
    before(async () => { gateway = await listening(['gateway']); });
    after(() => gateway?.child.kill());

    for (const [transport, route] of [['http', '/mcp'], ['sse', '/sse']]) {
        it(`over ${transport === 'http' ? 'Streamable HTTP' : 'HTTP+SSE'}: tools, a call, resources and prompts`, async () => {
            const at = [`${gateway.base}${route}`, '--transport', transport];
            const listed = await inspect(at, ['--method', 'tools/list']);
            assert.ok(listed.tools.some(t => t.name === 'fixture/echo'));
            const called = await inspect(at, ['--method', 'tools/call', '--tool-name', 'fixture/echo',
                '--tool-arg', `text=via ${transport}`]);
            assert.equal(text(called), `via ${transport}`);
            const resources = await inspect(at, ['--method', 'resources/list']);
            const uri = resources.resources.find(r => r.name === 'static-text' || /static-text/.test(r.uri))?.uri;
            assert.ok(uri, JSON.stringify(resources).slice(0, 400));
            const read = await inspect(at, ['--method', 'resources/read', '--uri', uri]);
            assert.equal(read.contents[0].uri, uri);
            const prompts = await inspect(at, ['--method', 'prompts/list']);
            assert.ok(prompts.prompts.some(p => p.name === 'fixture/test_simple_prompt'), JSON.stringify(prompts).slice(0, 300));
        });
    }
});

describe('MCP Inspector CLI through droid bridge', () => {
    it('reaches a server that speaks only 2026-07-28, which the Inspector does not', async () => {
        const bridged = ['--', DROID, 'bridge', '--', DROID, 'serve', '--revisions', '2026-07-28'];
        const called = await inspect(bridged, ['--method', 'tools/call', '--tool-name', 'echo',
            '--tool-arg', 'text=across the eras']);
        assert.equal(text(called), 'across the eras');
    });
});
