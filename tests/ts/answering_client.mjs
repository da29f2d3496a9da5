#!/usr/bin/env node
// A 2025 host made of the TypeScript SDK v2 client (npm @modelcontextprotocol/client, pinned in
// .ci/install-peers.sh, installed in .peers/ts) that answers sampling, for tests/cluster/answers.rs.
//
// Usage: node tests/ts/answering_client.mjs --url URL [--header 'K: V']... TAG...
//
// It opens one 2025-era session (the initialize handshake), declaring sampling, and for each TAG
// calls the tool `fx__sample {"tag": TAG}`: the upstream asks the host for a message during the
// call and the host answers "answered by typescript: <prompt>". Behind a round-robin load
// balancer the answer, a new POST, lands on another replica than the call. One JSON line per call:
//   {"tag":TAG,"result":{CallToolResult}} | {"tag":TAG,"error":{code,message}}

import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const peers = process.env.MCP_TS_PEERS ?? resolve(here, '../../.peers/ts');

async function load(pkg) {
    const root = join(peers, 'node_modules', pkg);
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    return import(pathToFileURL(join(root, manifest.exports['.'].import.default)).href);
}

const { Client, StreamableHTTPClientTransport } = await load('@modelcontextprotocol/client');

function parseArgs(argv) {
    const args = { url: undefined, headers: {}, tags: [] };
    for (let i = 0; i < argv.length; i++) {
        if (argv[i] === '--url') args.url = argv[++i];
        else if (argv[i] === '--header') {
            const [key, ...value] = argv[++i].split(':');
            args.headers[key.trim()] = value.join(':').trim();
        } else args.tags.push(argv[i]);
    }
    if (!args.url) throw new Error('--url is required');
    return args;
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const client = new Client({ name: 'ts-answering-client', version: '1.0.0' }, { capabilities: { sampling: {} } });
    client.setRequestHandler('sampling/createMessage', async request => {
        const prompt = request.params.messages.map(message => message.content?.text ?? '').join(' ');
        return {
            model: 'test-model',
            role: 'assistant',
            content: { type: 'text', text: `answered by typescript: ${prompt}` },
            stopReason: 'endTurn',
        };
    });
    const transport = new StreamableHTTPClientTransport(new URL(args.url), { requestInit: { headers: args.headers } });
    await client.connect(transport);
    for (const tag of args.tags) {
        try {
            const result = await client.callTool({ name: 'fx__sample', arguments: { tag } });
            process.stdout.write(JSON.stringify({ tag, result }) + '\n');
        } catch (error) {
            if (typeof error?.code !== 'number') throw error;
            process.stdout.write(JSON.stringify({ tag, error: { code: error.code, message: error.message } }) + '\n');
        }
    }
    await client.close();
}

main().then(
    () => process.exit(0),
    error => {
        process.stderr.write(`answering_client.mjs: ${error?.stack ?? error}\n`);
        process.exit(1);
    },
);
