/**
 * The demo server against callers it does not know (issue 7, items 4 and 5), on the real process over TCP:
 *
 * - the `Host` header is checked against an allow-list (loopback names by default, `IDEM_ALLOWED_HOSTS`): a
 *   DNS-rebinding page's own name is answered 421 before anything else is looked at;
 * - `/metrics` is not on the API's port: it has a listener of its own (`IDEM_METRICS_PORT`), loopback by default;
 * - a request with a bad or missing API key is answered 401 from its headers alone: its body is never read
 *   (under `Expect: 100-continue` it is never even sent);
 * - connections beyond `IDEM_MAX_CONNECTIONS` are closed unanswered while the held ones stay;
 * - headers and whole requests that do not arrive in time get a 408 problem (`IDEM_HEADERS_TIMEOUT_MS`,
 *   `IDEM_REQUEST_TIMEOUT_MS`);
 * - 64 slow anonymous senders of 1 MiB bodies cost the server almost no memory (RSS before and after).
 *
 * Every bound below is a limit on waiting for an event, never a sleep that orders events.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { rawExchange, rawRequest, type RawOutcome } from '../fuzz/raw.js';
import { api, startDemo, type DemoProcess } from '../harness.js';
import { hold, rssMiB, statusLine, type Held } from './held-socket.js';

const MiB = 1_048_576;
const ALICE = 'Bearer sk_test_alice';
const CHARGE = '{"amount":500}';

/** The demo on the memory store and ledger, with `env` on top. */
const inMemory = (env: Record<string, string> = {}) =>
  startDemo({ IDEM_STORE: 'memory:', IDEM_LEDGER: ':memory:', ...env });

/** A request's bytes with exactly the given headers (no Host or Connection added). */
const bare = (method: string, target: string, headers: ReadonlyArray<readonly [string, string]>, body = '') =>
  rawRequest(method, target, headers, body, { bare: true });

/** A JSON POST to /v1/charges by Alice as raw bytes: Host, Authorization and Content-Type, then `headers`. */
const alicesPost = (headers: ReadonlyArray<readonly [string, string]>, body = '') =>
  bare(
    'POST',
    '/v1/charges',
    [['Host', '127.0.0.1'], ['Authorization', ALICE], ['Content-Type', 'application/json'], ...headers],
    body,
  );
const LENGTH = ['Content-Length', String(CHARGE.length)] as const;

/** A keyed charge by Alice as raw bytes, its Content-Length the charge's; `after` follows it on the wire. */
const alicesCharge = (after = '', extra: ReadonlyArray<readonly [string, string]> = []) =>
  alicesPost([['Idempotency-Key', randomUUID()], LENGTH, ...extra], CHARGE + after);

/** Status, content type and problem type of a raw outcome; the outcome's kind when nothing was answered. */
function summary(outcome: RawOutcome): unknown {
  if (outcome.kind !== 'response') return outcome.kind;
  const type =
    outcome.headers.get('content-type') === 'application/problem+json'
      ? (JSON.parse(outcome.body.toString()) as { type: string }).type
      : null;
  return [outcome.status, type];
}

const portOf = (url: string) => new URL(url).port;

describe('the Host allow-list and the metrics listener', () => {
  let server: DemoProcess;
  let metricsUrl: string;
  beforeAll(async () => {
    server = await inMemory({ IDEM_METRICS_PORT: '0' });
    metricsUrl = /metrics: (http:\/\/\S+\/metrics)/.exec(server.output())?.[1] ?? 'metrics URL not printed';
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('a Host that is not a loopback name is a 421 problem, before the API key or the body is looked at; nothing is charged', async () => {
    const alice = api(server.url);
    const before = await alice.balance();
    const port = portOf(server.url);
    const rebound = (host: string, target = '/v1/charges') =>
      rawExchange(
        server.url,
        bare(
          'POST',
          target,
          [
            ['Host', host],
            ['Authorization', ALICE],
            ['Idempotency-Key', randomUUID()],
            ['Content-Type', 'application/json'],
            ['Content-Length', String(CHARGE.length)],
            ['Connection', 'close'],
          ],
          CHARGE,
        ),
      );
    const refused = [
      summary(await rebound(`evil.example:${port}`)),
      summary(await rebound('evil.example')),
      summary(await rebound(`127.0.0.1.evil.example:${port}`)),
      // An absolute-form target names the host too (RFC 9112 §3.2.2), and is checked like Host.
      summary(await rebound(`127.0.0.1:${port}`, `http://evil.example:${port}/v1/charges`)),
    ];
    const host421 = [421, 'urn:idem:problem:host-not-allowed'];
    expect(refused).toEqual([host421, host421, host421, host421]);
    expect(await alice.balance()).toEqual(before);
    // The loopback names, with any port or none, in any case, are served.
    const served = [];
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, 'LOCALHOST', '127.0.0.1']) {
      served.push(
        summary(
          await rawExchange(
            server.url,
            bare('GET', '/healthz', [
              ['Host', host],
              ['Connection', 'close'],
            ]),
          ),
        ),
      );
    }
    expect(served).toEqual([
      [200, null],
      [200, null],
      [200, null],
      [200, null],
      [200, null],
    ]);
  });

  it('IDEM_ALLOWED_HOSTS replaces the loopback names: a listed name is served (any port, or the one listed); localhost is 421', async () => {
    const named = await inMemory({ IDEM_ALLOWED_HOSTS: 'pay.example.test,Admin.example.test:8443' });
    try {
      const status = async (host: string) =>
        summary(
          await rawExchange(
            named.url,
            bare('GET', '/healthz', [
              ['Host', host],
              ['Connection', 'close'],
            ]),
          ),
        );
      expect([
        await status('pay.example.test'),
        await status('pay.example.test:443'),
        await status('admin.example.test:8443'),
        await status('admin.example.test:443'),
        await status(`localhost:${portOf(named.url)}`),
      ]).toEqual([
        [200, null],
        [200, null],
        [200, null],
        [421, 'urn:idem:problem:host-not-allowed'],
        [421, 'urn:idem:problem:host-not-allowed'],
      ]);
    } finally {
      await named.stop();
    }
  });

  it('/metrics is not served on the API port; its own listener serves it, and nothing else, to the allowed hosts', async () => {
    expect((await fetch(`${server.url}/metrics`)).status).toBe(404);
    const scrape = await fetch(metricsUrl);
    const text = await scrape.text();
    expect([
      scrape.status,
      scrape.headers.get('content-type'),
      /^idem_http_connections_dropped_total 0$/m.test(text),
    ]).toEqual([200, 'text/plain; version=0.0.4; charset=utf-8', true]);
    const base = metricsUrl.slice(0, -'/metrics'.length);
    expect([
      (await fetch(`${base}/v1/balance`, { headers: { authorization: ALICE } })).status,
      (await fetch(metricsUrl, { method: 'POST' })).status,
      summary(
        await rawExchange(
          base,
          bare('GET', '/metrics', [
            ['Host', 'evil.example'],
            ['Connection', 'close'],
          ]),
        ),
      ),
    ]).toEqual([404, 405, [421, 'urn:idem:problem:host-not-allowed']]);
  });
});

describe('the body is read only after authentication', () => {
  let server: DemoProcess;
  beforeAll(async () => {
    server = await inMemory();
  });
  afterAll(async () => {
    await server?.stop();
  });

  const head = (
    authorization: string | null,
    extra: ReadonlyArray<readonly [string, string]> = [],
    target = '/v1/charges',
  ) =>
    bare('POST', target, [
      ['Host', '127.0.0.1'],
      ...(authorization === null ? [] : [['Authorization', authorization] as const]),
      ['Content-Type', 'application/json'],
      ['Content-Length', String(MiB)],
      ...extra,
    ]);

  it('a request declaring a 1 MiB body that sends only its headers, with a bad or missing key, gets its 401 at once', async () => {
    const answers = [];
    for (const authorization of ['Bearer sk_test_mallory', null, 'Basic c2tfdGVzdF9hbGljZTo=', 'Bearer sk_lab_']) {
      // The client never sends the body: an answer can only come from the headers.
      const outcome = await rawExchange(server.url, head(authorization), { end: false, timeoutMs: 5_000 });
      answers.push([summary(outcome), outcome.kind === 'response' ? outcome.headers.get('www-authenticate') : null]);
    }
    const unauthorized = [[401, 'urn:idem:problem:unauthorized'], 'Bearer'];
    expect(answers).toEqual([unauthorized, unauthorized, unauthorized, unauthorized]);
  });

  it('under Expect: 100-continue a refused sender is never asked for its body; an authenticated one is, and is served', async () => {
    const refused = await hold(server.url, head('Bearer sk_test_mallory', [['Expect', '100-continue']]));
    expect(await statusLine(refused)).toBe('HTTP/1.1 401 Unauthorized');
    await refused.closed; // the body was never asked for: the connection closes after the answer
    const admitted = await hold(server.url, alicesPost([LENGTH, ['Expect', '100-continue'], ['Connection', 'close']]));
    expect(await statusLine(admitted)).toBe('HTTP/1.1 100 Continue');
    admitted.socket.write(CHARGE);
    await admitted.closed;
    expect(/HTTP\/1\.1 201 Created/.test(admitted.received())).toBe(true);
  });

  it('a route that reads no body (the pages) answers without waiting for a declared 1 MiB body', async () => {
    const outcome = await rawExchange(server.url, head(null, [], '/'), { end: false, timeoutMs: 5_000 });
    expect(summary(outcome)).toEqual([404, 'urn:idem:problem:not-found']);
  });

  it('a CONNECT is answered 405, not closed in silence', async () => {
    const tunnel = await hold(server.url, bare('CONNECT', '127.0.0.1:443', [['Host', '127.0.0.1:443']]));
    await tunnel.closed;
    expect(tunnel.received().split('\r\n')[0]).toBe('HTTP/1.1 405 Method Not Allowed');
  });

  it('pipelined behind a charge, an early 401 waits its turn: the charge’s 201 comes first, then the 401', async () => {
    const charge = alicesCharge();
    const refused = bare(
      'POST',
      '/v1/charges',
      [
        ['Host', '127.0.0.1'],
        ['Content-Type', 'application/json'],
        ['Content-Length', '10'],
      ],
      '{"a":1234}',
    );
    // Both requests in one write, as a pipelining client sends them.
    const both = await hold(server.url, Buffer.concat([Buffer.from(charge), Buffer.from(refused)]));
    await both.closed;
    const statuses = [...both.received().matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => m[1]);
    expect(statuses).toEqual(['201', '401']);
  });

  it('pipelined behind a charge, a malformed request’s 400 waits its turn: the charge’s 201 comes first', async () => {
    const malformed = alicesPost([['Transfer-Encoding', 'chunked']], 'zz\r\n{}\r\n0\r\n\r\n'); // a chunk size that is not hex
    const both = await hold(server.url, Buffer.concat([Buffer.from(alicesCharge()), Buffer.from(malformed)]));
    await both.closed;
    const statuses = [...both.received().matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => m[1]);
    expect(statuses).toEqual(['201', '400']);
  });

  it('a client that half-closes once its slow charge is sent still gets the 201', async () => {
    // FIN after the request: nothing more to send, still reading. Node's default closed the socket on it, and the
    // charge was made with no answer for anyone (found by the hostile review, 10/10).
    const sender = await hold(server.url, alicesCharge('', [['Idem-Lab-Delay-Ms', '300']]));
    sender.socket.end();
    await sender.closed;
    expect([...sender.received().matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => m[1])).toEqual(['201']);
  });

  it('a refused request whose body is still arriving is answered first, then cut once the body lingers', async () => {
    const sender = await hold(server.url, head('Bearer sk_test_mallory'));
    sender.socket.write(Buffer.alloc(64 * 1024, 0x61)); // some of the body, never all of it
    expect(await statusLine(sender)).toBe('HTTP/1.1 401 Unauthorized');
    await sender.closed; // cut by the server (LINGER_MS), not by this client
    expect(sender.socket.destroyed).toBe(true);
  });

  it('garbage after a complete charge, still arriving, never resets the charge’s 201 away', async () => {
    // A body longer than its Content-Length: the charge is complete, the rest is garbage the client keeps sending
    // and reads its answer only afterwards. Node closed the socket the moment the 201 was written, over the
    // garbage: a reset, and 0 of 10 such clients got their 201 (found by the hostile review).
    const charge = alicesCharge('TRAILING');
    const sender = await hold(server.url, charge);
    sender.socket.pause(); // reads nothing until it has sent all it has
    const errors: string[] = [];
    sender.socket.on('error', (error: Error & { code?: string }) => errors.push(error.code ?? error.message));
    for (let i = 0; i < 30 && !sender.socket.destroyed; i++) {
      await new Promise<void>((done) => sender.socket.write(Buffer.alloc(4096, 0x47), () => done()));
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    sender.socket.resume();
    sender.socket.end();
    await sender.closed;
    expect(errors).toEqual([]);
    expect([...sender.received().matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => m[1])).toEqual(['201']);
  });

  it('a framing error whose body is still arriving is answered 400, and the rest is read and dropped, never reset', async () => {
    // Two Content-Lengths: the parser refuses the head while the client is still sending. Cutting the connection
    // over the bytes still arriving resets it, and a client that had not yet read its 400 lost it (11 of 216
    // framing errors with a 600 kB or 1.1 MB body did, before).
    const sender = await hold(server.url, head(ALICE, [['Content-Length', '10']]));
    const errors: string[] = [];
    sender.socket.on('error', (error: Error & { code?: string }) => errors.push(error.code ?? error.message));
    expect(await statusLine(sender)).toBe('HTTP/1.1 400 Bad Request');
    for (let i = 0; i < 16; i++)
      await new Promise<void>((done) => sender.socket.write(Buffer.alloc(64 * 1024, 0x61), () => done()));
    sender.socket.end();
    await sender.closed;
    expect(errors).toEqual([]);
    expect([...sender.received().matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => m[1])).toEqual(['400']);
  });
});

describe('the connection cap and the timeouts', () => {
  it('connections beyond IDEM_MAX_CONNECTIONS are closed unanswered; the held ones stay; once they go, a new one is served', async () => {
    const server = await inMemory({
      IDEM_MAX_CONNECTIONS: '8',
      // The cap alone: one address may hold all of it here (the share is in fair-connections.test.ts).
      IDEM_MAX_CONNECTIONS_PER_ADDRESS: '8',
      IDEM_METRICS_PORT: '0',
    });
    const metricsUrl = /metrics: (http:\/\/\S+\/metrics)/.exec(server.output())?.[1] ?? 'metrics URL not printed';
    const held: Held[] = [];
    try {
      // Eight slow connections, each inside its headers. The listener accepts in arrival order, so these are
      // the eight it holds.
      for (let i = 0; i < 8; i++) held.push(await hold(server.url, 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n'));
      const extra = await Promise.all(
        Array.from({ length: 4 }, () =>
          rawExchange(server.url, 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n', {
            timeoutMs: 5_000,
          }),
        ),
      );
      expect(extra.map((outcome) => outcome.kind)).toEqual(['closed', 'closed', 'closed', 'closed']);
      expect(held.map((h) => [h.socket.destroyed, h.received()])).toEqual(Array.from({ length: 8 }, () => [false, '']));
      // The metrics listener is not behind the API's cap: it answers while the API is full, and counted the drops.
      const text = await (await fetch(metricsUrl)).text();
      expect(/^idem_http_connections_dropped_total (\d+)$/m.exec(text)?.[1]).toBe('4');
      // The held ones complete their request and are served.
      held[0]?.socket.write('Connection: close\r\n\r\n');
      expect(await statusLine(held[0] as Held)).toBe('HTTP/1.1 200 OK');
      for (const h of held) h.socket.destroy();
      await Promise.all(held.map((h) => h.closed));
      // The server notices the closes on its own time: poll until a new connection is served.
      let status: unknown = 'closed';
      await waitFor(
        () => `a new connection to be answered 200, last ${String(status)}`,
        async () => {
          const outcome = await rawExchange(
            server.url,
            'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n',
            { timeoutMs: 5_000 },
          );
          status = outcome.kind === 'response' ? outcome.status : outcome.kind;
          return status === 200;
        },
        { everyMs: 20 },
      );
    } finally {
      for (const h of held) h.socket.destroy();
      await server.stop();
    }
  });

  it('headers, or a whole request, that do not arrive in time get a 408 problem and the connection is closed', async () => {
    const server = await inMemory({ IDEM_HEADERS_TIMEOUT_MS: '500', IDEM_REQUEST_TIMEOUT_MS: '1000' });
    try {
      const slowHeaders = await rawExchange(
        server.url,
        'POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bea',
        { end: false, timeoutMs: 8_000 },
      );
      const slowBody = await rawExchange(server.url, alicesPost([LENGTH], CHARGE.slice(0, 5)), {
        end: false,
        timeoutMs: 8_000,
      });
      const timedOut = [408, 'urn:idem:problem:request-timeout'];
      expect([summary(slowHeaders), summary(slowBody)]).toEqual([timedOut, timedOut]);
      expect([slowHeaders.kind === 'response' && slowHeaders.headers.get('connection')]).toEqual(['close']);
      // Nothing was charged; a request that arrives in time is served.
      expect(await api(server.url).balance()).toEqual({ object: 'balance', charged: 0, count: 0 });
    } finally {
      await server.stop();
    }
  });
});

describe.skipIf(process.platform !== 'linux')('memory under slow anonymous senders', () => {
  it('64 slow senders of 1 MiB bodies with a bad key: each gets its 401 at once, and RSS grows by under 16 MiB', async () => {
    const server = await inMemory();
    const senders: Held[] = [];
    try {
      const pid = server.child.pid as number;
      // Warm up the paths first, so the baseline has them compiled.
      for (let i = 0; i < 5; i++) {
        await api(server.url).charge({ amount: 500 }, { 'idempotency-key': randomUUID() });
        await api(server.url, 'sk_test_mallory').charge({ amount: 500 });
      }
      const before = rssMiB(pid);
      const headers = bare('POST', '/v1/charges', [
        ['Host', '127.0.0.1'],
        ['Authorization', 'Bearer sk_test_mallory'],
        ['Content-Type', 'application/json'],
        ['Content-Length', String(MiB)],
      ]);
      for (let i = 0; i < 64; i++)
        senders.push(await hold(server.url, Buffer.concat([headers, Buffer.alloc(MiB - 1, 0x61)])));
      const lines = await Promise.all(senders.map((sender) => statusLine(sender, 10_000)));
      const after = rssMiB(pid);
      console.log(
        `RSS with 64 slow anonymous 1 MiB senders: ${before} MiB before, ${after} MiB after (+${Math.round((after - before) * 10) / 10} MiB)`,
      );
      expect(new Set(lines)).toEqual(new Set(['HTTP/1.1 401 Unauthorized']));
      expect(after - before).toBeLessThan(16);
    } finally {
      for (const sender of senders) sender.socket.destroy();
      await server.stop();
    }
  });
});
