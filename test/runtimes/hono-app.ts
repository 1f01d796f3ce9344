/**
 * @module Entry bundled by `runtimes.test.ts`: a Hono app behind `idem/hono` on the memory store, its responses
 * sealed (`sealed()`: AES-GCM through the runtime's own WebCrypto, so every replay is opened there), served by the
 * runtime's own server — `Bun.serve`, `Deno.serve`, or `node:http` through a small fetch bridge — on a free port it
 * prints as `IDEM_LISTENING <json>`. The test drives it over HTTP. `POST /v1/charges` counts its executions; a
 * request with `Test-Hold: <name>` marks `<name>` started and waits until `POST /test/release/<name>`, and
 * `GET /test/started/<name>` answers once it has started: the signals that order the in-flight case.
 */
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from '../../packages/idem/src/adapters/hono/index.js';
import { sealed } from '../../packages/idem/src/core/sealed.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { runtimeName } from './runtime.js';

interface Signal {
  readonly promise: Promise<void>;
  readonly fire: () => void;
}
const signal = (): Signal => {
  let fire = () => {};
  const promise = new Promise<void>((resolve) => (fire = resolve));
  return { promise, fire };
};
const holds = new Map<string, { readonly started: Signal; readonly released: Signal }>();
const hold = (name: string) => {
  let entry = holds.get(name);
  if (!entry) holds.set(name, (entry = { started: signal(), released: signal() }));
  return entry;
};

let executions = 0;
const app = new Hono<{ Variables: IdempotencyVariables }>();
const store = sealed(memoryStore(), { keys: [{ id: 'runtimes', key: new Uint8Array(32).fill(7) }] });
app.post('/v1/charges', idempotency({ store, scope: 'single-tenant', required: true }), async (c) => {
  executions += 1;
  const n = executions;
  const { amount, currency } = await c.req.json<{ amount: number; currency: string }>();
  const held = c.req.header('test-hold');
  if (held) {
    hold(held).started.fire();
    await hold(held).released.promise;
  }
  c.header('Location', `/v1/charges/ch_${n}`);
  // A body no second execution could reproduce: its number, the record id, and a random nonce.
  return c.json({ id: `ch_${n}`, amount, currency, record: c.get('idempotency').id, nonce: crypto.randomUUID() }, 201);
});
app.get('/test/started/:name', async (c) => {
  await hold(c.req.param('name')).started.promise;
  return c.text('started');
});
app.post('/test/release/:name', (c) => {
  hold(c.req.param('name')).released.fire();
  return c.text('released');
});
app.get('/test/executions', (c) => c.json({ executions }));

const announce = (port: number, server: string) =>
  console.log(`IDEM_LISTENING ${JSON.stringify({ port, server, runtime: runtimeName() })}`);

interface BunGlobal {
  serve(options: { port: number; hostname: string; fetch: (request: Request) => Response | Promise<Response> }): {
    port: number;
  };
}
interface DenoGlobal {
  serve(
    options: { port: number; hostname: string; onListen: (address: { port: number }) => void },
    handler: (request: Request) => Response | Promise<Response>,
  ): unknown;
}
const runtime = globalThis as { Bun?: BunGlobal; Deno?: DenoGlobal };

if (runtime.Bun) {
  const server = runtime.Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: (request) => app.fetch(request) });
  announce(server.port, 'Bun.serve');
} else if (runtime.Deno) {
  runtime.Deno.serve(
    { port: 0, hostname: '127.0.0.1', onListen: ({ port }) => announce(port, 'Deno.serve') },
    (request) => app.fetch(request),
  );
} else {
  const { createServer } = await import('node:http');
  // The fetch bridge: node:http request → Web Request → app.fetch → node:http response, bytes untouched.
  const server = createServer((req, res) => {
    const chunks: Uint8Array[] = [];
    req.on('data', (chunk: Uint8Array) => chunks.push(chunk));
    req.on('end', () => {
      const headers = new Headers();
      for (let i = 0; i < req.rawHeaders.length; i += 2)
        headers.append(req.rawHeaders[i] ?? '', req.rawHeaders[i + 1] ?? '');
      const method = req.method ?? 'GET';
      const body = method === 'GET' || method === 'HEAD' ? null : Buffer.concat(chunks);
      const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, {
        method,
        headers,
        body,
      });
      Promise.resolve(app.fetch(request))
        .then(async (response) => {
          const bytes = Buffer.from(await response.arrayBuffer());
          res.writeHead(response.status, [...response.headers].flat());
          res.end(bytes);
        })
        .catch((error: unknown) => {
          console.error(error);
          res.writeHead(500).end();
        });
    });
  });
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    announce(typeof address === 'object' && address ? address.port : -1, 'node:http');
  });
}
