#!/usr/bin/env node
// An MCP host made of the TypeScript SDK v2 client (npm @modelcontextprotocol/client, pinned in
// .ci/install-peers.sh, installed in .peers/ts), for tests/interop/ts_client.rs.
//
// Usage: node tests/ts/client.mjs --url URL [--mode legacy|2026-07-28] [--header 'K: V']... OP...
//
// It connects over Streamable HTTP (`legacy`: the 2025 initialize handshake; `2026-07-28`: pinned
// to the modern era, no fallback), runs the OPs in order on that one connection and prints one
// JSON line per OP on stdout (logs go to stderr):
//   era                        {"op":"era","version":V,"era":E}
//   tools_all                  {"op":"tools_all","names":[...],"pages":n,"tools":[raw]}   (n: the pages the
//                              client walked itself, following nextCursor)
//   prompts_all                {"op":"prompts_all","names":[...],"pages":n}
//   resources_all              {"op":"resources_all","uris":[...],"pages":n}
//   templates_all              {"op":"templates_all","uriTemplates":[...],"pages":n}
//   call:NAME:JSONARGS         {"op":"call","name":NAME,"result":{CallToolResult}} | {"op":..,"error":{code,message}}
//   prompt:NAME:JSONARGS       {"op":"prompt","name":NAME,"result":{GetPromptResult}} | error
//   complete:PROMPT:ARG:VALUE  {"op":"complete","values":[...]} | error
//   complete_template:URITEMPLATE:ARG:VALUE   the same for a resource template
//   read:URI                   {"op":"read","result":{ReadResourceResult}} | error
//   subscribe:URI[,URI...]     legacy: resources/subscribe (one URI); modern: one subscriptions/listen
//                              stream for the URIs {"op":"subscribe","honored":[uris] | null}
//   wait_updated:URI           waits (20 s) until notifications/resources/updated for URI arrives:
//                              {"op":"wait_updated","uri":URI,"heard":true|false}
//   forget_updated:URI         a later wait_updated:URI waits for an `updated` heard after this op:
//                              {"op":"forget_updated","uri":URI}
//   heard                      {"op":"heard","uris":[every URI an `updated` was heard for, in order]}
// Lists and reads ask the proxy every time (cacheMode 'refresh'). The client checks a tool's
// structuredContent against the outputSchema of the last listing: list tools before calling.

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

const WAIT_MS = 20_000;
// Every answer is the proxy's; lists are still written to the client's cache, which is where
// callTool finds the outputSchema it validates structuredContent against.
const NO_CACHE = { cacheMode: 'refresh' };

function out(obj) {
    process.stdout.write(JSON.stringify(obj) + '\n');
}

function parseArgs(argv) {
    const args = { url: undefined, mode: 'legacy', headers: {}, ops: [] };
    for (let i = 0; i < argv.length; i++) {
        if (argv[i] === '--url') args.url = argv[++i];
        else if (argv[i] === '--mode') args.mode = argv[++i];
        else if (argv[i] === '--header') {
            const [key, ...value] = argv[++i].split(':');
            args.headers[key.trim()] = value.join(':').trim();
        } else args.ops.push(argv[i]);
    }
    if (!args.url) throw new Error('--url is required');
    return args;
}

/** Requests the client sent, by method (its own page walks included). */
const sent = {};

function countRequests(transport) {
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
        if (message.method !== undefined && message.id !== undefined) sent[message.method] = (sent[message.method] ?? 0) + 1;
        return send(message, options);
    };
}

/** A whole list as the client gets it (called without a cursor, it walks every page itself),
 * and how many pages that took. */
async function allPages(method, fetch, items, pick) {
    const before = sent[method] ?? 0;
    const list = await fetch();
    return { picked: list[items].map(pick), raw: list[items], pages: (sent[method] ?? 0) - before };
}

/** Notifications/resources/updated as heard, and waiters for them. */
class Updates {
    constructor() {
        this.heard = new Set();
        this.order = [];
        this.waiters = [];
    }
    push(uri) {
        this.heard.add(uri);
        this.order.push(uri);
        for (const waiter of this.waiters.filter(w => w.uri === uri)) waiter.resolve(true);
        this.waiters = this.waiters.filter(w => w.uri !== uri);
    }
    wait(uri) {
        if (this.heard.has(uri)) return Promise.resolve(true);
        return new Promise(resolve => {
            const waiter = { uri, resolve };
            this.waiters.push(waiter);
            setTimeout(() => resolve(false), WAIT_MS).unref();
        });
    }
}

async function runOp(client, updates, subscriptions, mode, op) {
    const colon = op.indexOf(':');
    const kind = colon < 0 ? op : op.slice(0, colon);
    const rest = colon < 0 ? '' : op.slice(colon + 1);
    const nameAndJson = () => {
        const at = rest.indexOf(':');
        return at < 0 ? [rest, {}] : [rest.slice(0, at), JSON.parse(rest.slice(at + 1) || '{}')];
    };
    switch (kind) {
        case 'era':
            return { op: kind, version: client.getNegotiatedProtocolVersion(), era: client.getProtocolEra() };
        case 'tools_all': {
            const fetch = () => client.listTools(undefined, NO_CACHE);
            const { picked, raw, pages } = await allPages('tools/list', fetch, 'tools', t => t.name);
            return { op: kind, names: picked, pages, tools: raw };
        }
        case 'prompts_all': {
            const fetch = () => client.listPrompts(undefined, NO_CACHE);
            const { picked, pages } = await allPages('prompts/list', fetch, 'prompts', p => p.name);
            return { op: kind, names: picked, pages };
        }
        case 'resources_all': {
            const fetch = () => client.listResources(undefined, NO_CACHE);
            const { picked, pages } = await allPages('resources/list', fetch, 'resources', r => r.uri);
            return { op: kind, uris: picked, pages };
        }
        case 'templates_all': {
            const fetch = () => client.listResourceTemplates(undefined, NO_CACHE);
            const { picked, pages } = await allPages('resources/templates/list', fetch, 'resourceTemplates', t => t.uriTemplate);
            return { op: kind, uriTemplates: picked, pages };
        }
        case 'call': {
            const [name, args] = nameAndJson();
            return { op: kind, name, result: await client.callTool({ name, arguments: args }) };
        }
        case 'prompt': {
            const [name, args] = nameAndJson();
            return { op: kind, name, result: await client.getPrompt({ name, arguments: args }) };
        }
        case 'complete':
        case 'complete_template': {
            const last = rest.lastIndexOf(':');
            const middle = rest.lastIndexOf(':', last - 1);
            const [target, argument, value] = [rest.slice(0, middle), rest.slice(middle + 1, last), rest.slice(last + 1)];
            const ref = kind === 'complete' ? { type: 'ref/prompt', name: target } : { type: 'ref/resource', uri: target };
            const result = await client.complete({ ref, argument: { name: argument, value } });
            return { op: kind, values: result.completion.values };
        }
        case 'read':
            return { op: kind, result: await client.readResource({ uri: rest }, NO_CACHE) };
        case 'subscribe': {
            if (mode === 'legacy') {
                await client.subscribeResource({ uri: rest });
                return { op: kind, honored: null };
            }
            const subscription = await client.listen({ resourceSubscriptions: rest.split(',') });
            subscriptions.push(subscription);
            return { op: kind, honored: subscription.honoredFilter.resourceSubscriptions ?? [] };
        }
        case 'wait_updated':
            return { op: kind, uri: rest, heard: await updates.wait(rest) };
        case 'heard':
            return { op: kind, uris: updates.order };
        case 'forget_updated':
            updates.heard.delete(rest);
            return { op: kind, uri: rest };
        default:
            throw new Error(`unknown op ${op}`);
    }
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const updates = new Updates();
    const client = new Client({ name: 'ts-client-test', version: '1.0.0' });
    client.setNotificationHandler('notifications/resources/updated', n => updates.push(n.params.uri));
    if (args.mode !== 'legacy') client.setVersionNegotiation({ mode: { pin: args.mode } });
    const transport = new StreamableHTTPClientTransport(new URL(args.url), {
        requestInit: { headers: args.headers },
    });
    countRequests(transport);
    await client.connect(transport);
    const subscriptions = [];
    for (const op of args.ops) {
        try {
            out(await runOp(client, updates, subscriptions, args.mode, op));
        } catch (error) {
            if (typeof error?.code !== 'number') throw error;
            out({ op: op.split(':')[0], error: { code: error.code, message: error.message } });
        }
    }
    for (const subscription of subscriptions) await subscription.close();
    await client.close();
}

main().then(
    () => process.exit(0),
    error => {
        process.stderr.write(`client.mjs: ${error?.stack ?? error}\n`);
        process.exit(1);
    },
);
