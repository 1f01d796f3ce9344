/**
 * Bad input, fuzzed (issue 6, item 3): keys, bodies, headers, methods and HTTP framing thrown at the real demo
 * server over TCP (SQLite, lab mode off). Property: every answer is exactly the one the oracle (./oracle.ts)
 * owes — a 4xx problem+json, or a correct success — never a 5xx, never a hung or silently dropped socket; and
 * the ledger and the records table change only for valid requests. `fetch` for what it can send; raw TCP
 * (./raw.ts) for what it refuses: bare CR/LF and control bytes, duplicate Idempotency-Key headers, invalid
 * methods, UTF-8 header bytes, lying Content-Lengths, chunked bodies.
 *
 * Seeded: `IDEM_FUZZ_SEED=<n>` replays a run; the seed is printed either way.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { authorization, body, contentType, fetchCase, AUTH, fetchKeyShape } from './arbitraries.js';
import { chargeOf, expected, MiB, type Expected, type SeenRequest } from './oracle.js';
import { fuzzedDemo } from './demo.js';
import { rawExchange, rawRequest, type RawOutcome } from './raw.js';

const SEED = Number(process.env.IDEM_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const FETCH_RUNS = 250;
const RAW_RUNS = 150;

let unique = 0;
/** A fresh prefix for every generated key, so a valid key is never reused (reuse is tested elsewhere). */
const nextPrefix = (): string => `f${SEED.toString(36)}.${(unique++).toString(36)}.`;

// ---- the server and its database -------------------------------------------------------------------------

describe(`fuzzed bad input over TCP (seed ${SEED})`, () => {
  const demo = fuzzedDemo('fuzz', SEED, '0');
  const { count } = demo;
  const counts = () => ({ charges: demo.rows('charges'), records: demo.rows('idem_records') });

  /** Checks one exchange against what the oracle owes: the answer, then the ledger and records deltas. */
  async function check(
    want: Expected,
    seen: SeenRequest,
    answer: Answer,
    before: { charges: number; records: number },
  ) {
    count(`status ${answer.status}`);
    expect(answer.status, 'never a hung socket, never a silent close').not.toBe(0);
    expect(answer.status, 'never a 5xx').toBeLessThan(500);
    expect(answer.status).toBe(want.status);
    if (want.status >= 400) {
      expect(answer.contentType).toBe('application/problem+json');
      if (seen.method !== 'HEAD') expect((JSON.parse(answer.body) as { status: number }).status).toBe(want.status);
    }
    if (want.charges && want.params) {
      const parsed = JSON.parse(answer.body) as Record<string, unknown>;
      if (want.status === 201) {
        expect([parsed.object, parsed.amount, parsed.currency, parsed.status]).toEqual([
          'charge',
          want.params.amount,
          want.params.currency,
          'succeeded',
        ]);
      } else {
        expect([parsed.type, parsed.code]).toEqual(['urn:idem:problem:card-declined', 'card_declined']);
      }
    }
    const after = counts();
    expect(after.charges - before.charges, 'the ledger changes only for a valid charge').toBe(want.charges ? 1 : 0);
    expect(after.records - before.records, 'a record is stored only for a valid keyed charge').toBe(
      want.records ? 1 : 0,
    );
  }

  it('fetch: every answer is the owed 4xx problem or a correct success, and only valid charges reach the ledger', async () => {
    await fc.assert(
      fc.asyncProperty(fetchCase, async (c) => {
        const keys = c.keys.map((shape) => shape(nextPrefix()));
        const seen: SeenRequest = {
          method: c.method,
          target: c.target,
          authorization: c.authorization,
          keys,
          body: c.body,
          contentType: c.contentType,
        };
        // A control character in a header value is refused by the HTTP parser, before any route or credential.
        const values = [...keys, ...c.extra.map(([, v]) => v)];
        const broken = values.some(hasControl);
        const want: Expected = broken ? { status: 400, charges: false, records: false } : expected(seen);
        const headers = new Headers();
        if (c.authorization !== null) headers.set('authorization', c.authorization);
        for (const key of keys) headers.append('idempotency-key', key);
        if (c.contentType !== null) headers.set('content-type', c.contentType);
        for (const [name, value] of c.extra) headers.append(name, value);
        const before = counts();
        // fetch refuses to send a control character (undici: "invalid header"): those go over raw TCP.
        const answer = broken
          ? fromRaw(
              await rawExchange(
                demo.url,
                rawRequest(
                  c.method,
                  c.target,
                  [
                    ...headers,
                    ['content-length', String(c.method === 'GET' || c.method === 'HEAD' ? 0 : c.body.length)],
                  ],
                  c.method === 'GET' || c.method === 'HEAD' ? '' : c.body,
                ),
              ),
            )
          : await viaFetch(demo.url, c.method, c.target, headers, c.body);
        await check(want, seen, answer, before);
      }),
      { seed: SEED, numRuns: FETCH_RUNS, interruptAfterTimeLimit: 60_000 },
    );
  }, 120_000);

  it('raw TCP: invalid methods, CR/LF and control bytes, duplicate keys, UTF-8 header bytes and lying lengths', async () => {
    const rawKey: fc.Arbitrary<(prefix: string) => Buffer> = fc.oneof(
      fetchKeyShape.map((k) => (p: string) => Buffer.from(k(p), 'latin1')),
      fc
        .constantFrom('\r', '\n', '\r\n', '\u0000', '\u0001', '\u007f')
        .map((c) => (p: string) => Buffer.from(`${p}${c}x`, 'latin1')),
      fc
        .string({ unit: 'grapheme', minLength: 1, maxLength: 8 })
        .map((s) => (p: string) => Buffer.from(`${p}${s}`, 'utf8')),
    );
    const rawCase = fc.record({
      method: fc.oneof(
        { weight: 6, arbitrary: fc.constant('POST') },
        fc.constantFrom('FOO', 'post', 'P@ST', 'PO ST', 'GET', ''),
      ),
      target: fc.oneof(
        { weight: 6, arbitrary: fc.constant('/v1/charges') },
        fc.constantFrom(
          '/v1/charges/%E0%A4%A',
          '/v1/./charges',
          '*',
          'http://evil.example/v1/charges',
          '/v1/charges#frag',
        ),
      ),
      authorization,
      keys: fc.oneof(
        { weight: 3, arbitrary: rawKey.map((k) => [k]) },
        fc.constant<Array<(prefix: string) => Buffer>>([]),
        fc.tuple(rawKey, rawKey).map(([a, b]) => [a, b]),
        rawKey.map((k) => [k, k]),
      ),
      contentType,
      body,
      framing: fc.constantFrom('exact', 'exact', 'exact', 'chunked', 'short', 'long', 'cl+te', 'two-cl'),
    });
    await fc.assert(
      fc.asyncProperty(rawCase, async (c) => {
        const keys = c.keys.map((shape) => shape(nextPrefix()));
        const headers: Array<readonly [string, string | Buffer]> = [];
        if (c.authorization !== null) headers.push(['Authorization', c.authorization]);
        for (const key of keys) headers.push(['Idempotency-Key', key]);
        if (c.contentType !== null) headers.push(['Content-Type', c.contentType]);
        let payload: Buffer = c.body;
        let visible: Buffer | undefined = c.body; // what the server reads as the body, when framing is sound
        switch (c.framing) {
          case 'exact':
            headers.push(['Content-Length', String(c.body.length)]);
            break;
          case 'chunked':
            headers.push(['Transfer-Encoding', 'chunked']);
            payload = Buffer.concat([
              Buffer.from(`${c.body.length.toString(16)}\r\n`),
              c.body,
              Buffer.from('\r\n0\r\n\r\n'),
            ]);
            if (c.body.length === 0) payload = Buffer.from('0\r\n\r\n');
            break;
          case 'short':
            // The rest of the body follows as garbage: the server must not answer that garbage over a charge.
            headers.push(['Content-Length', String(Math.floor(c.body.length / 2))]);
            visible = c.body.subarray(0, Math.floor(c.body.length / 2));
            break;
          case 'long':
            headers.push(['Content-Length', String(c.body.length + 10)]);
            visible = undefined;
            break;
          case 'cl+te':
            headers.push(['Content-Length', String(c.body.length)], ['Transfer-Encoding', 'chunked']);
            visible = undefined;
            break;
          case 'two-cl':
            headers.push(['Content-Length', String(c.body.length)], ['Content-Length', String(c.body.length + 1)]);
            visible = undefined;
            break;
        }
        // Refused by the HTTP parser (request line, header bytes, framing headers) before any handler runs.
        const parserRefuses =
          (visible === undefined && c.framing !== 'long') ||
          !/^[A-Z]+$/.test(c.method) ||
          !['POST', 'GET'].includes(c.method) ||
          keys.some((k) => hasControl(k.toString('latin1'))) ||
          c.target === '*';
        const seenKeys = keys.map((k) => k.toString('latin1'));
        const seen: SeenRequest = {
          method: c.method,
          target: normalise(c.target),
          authorization: c.authorization,
          keys: seenKeys,
          body: visible ?? Buffer.alloc(0),
          contentType: c.contentType,
        };
        // Then the Host (or an absolute-form target's authority) against the loopback allow-list: 421 otherwise.
        const foreignAuthority =
          /^https?:\/\//.test(c.target) && !/^https?:\/\/(127\.0\.0\.1|localhost|\[::1\])(:\d+)?\//.test(c.target);
        const refused = (status: number): Expected => ({ status, charges: false, records: false });
        const want: Expected = parserRefuses ? refused(400) : foreignAuthority ? refused(421) : expected(seen);
        const before = counts();
        const outcome = await rawExchange(demo.url, rawRequest(c.method, c.target, headers, payload));
        if (c.framing === 'long' && !parserRefuses && !foreignAuthority) {
          // A body that never arrives (the client half-closed early): answered from the line and headers alone if
          // they decide it (a 401 before any body is read; a GET, which has no body to wait for), else 400 or closed.
          count(`truncated body: ${outcome.kind === 'response' ? outcome.status : outcome.kind}`);
          const headFirst = expected({ ...seen, body: Buffer.alloc(0) });
          const answers = outcome.kind === 'response' ? [400, headFirst.status] : [];
          if (outcome.kind !== 'closed')
            expect(answers, `answered ${outcome.kind === 'response' ? outcome.status : outcome.kind}`).toContain(
              fromRaw(outcome).status,
            );
          expect(counts()).toEqual(before);
          return;
        }
        await check(want, seen, fromRaw(outcome), before);
      }),
      { seed: SEED + 1, numRuns: RAW_RUNS, interruptAfterTimeLimit: 60_000 },
    );
  }, 120_000);

  it('size limits and framing edges: 1 MiB is accepted, 1 MiB + 1 is 413 (Content-Length or chunked), oversized headers are 431', async () => {
    const pad = (size: number) => {
      const base = `{"amount":4242,"pad":"`;
      return Buffer.from(base + 'x'.repeat(size - base.length - 2) + '"}');
    };
    const exactly = pad(MiB);
    expect(exactly.length).toBe(MiB);
    const cases: Array<[string, Buffer, Record<string, string>, number, number]> = [
      ['1 MiB, keyed', exactly, { 'idempotency-key': randomUUID() }, 201, 1],
      ['1 MiB, keyless', exactly, {}, 201, 1],
      ['1 MiB + 1, keyed', pad(MiB + 1), { 'idempotency-key': randomUUID() }, 413, 0],
      ['1 MiB + 1, keyless', pad(MiB + 1), {}, 413, 0],
      ['8 MiB', pad(8 * MiB), { 'idempotency-key': randomUUID() }, 413, 0],
    ];
    for (const [name, bytes, headers, status, charges] of cases) {
      const before = counts();
      const answer = await viaFetch(
        demo.url,
        'POST',
        '/v1/charges',
        new Headers({ authorization: AUTH, 'content-type': 'application/json', ...headers }),
        bytes,
      );
      expect([name, answer.status, answer.contentType]).toEqual([
        name,
        status,
        status === 201 ? 'application/json' : 'application/problem+json',
      ]);
      expect(counts().charges - before.charges).toBe(charges);
    }
    // Chunked, so no Content-Length announces the size: the limit is counted as bytes arrive.
    const before = counts();
    const big = pad(MiB + 1);
    const chunked = Buffer.concat([Buffer.from(`${big.length.toString(16)}\r\n`), big, Buffer.from('\r\n0\r\n\r\n')]);
    const outcome = await rawExchange(
      demo.url,
      rawRequest(
        'POST',
        '/v1/charges',
        [
          ['Authorization', AUTH],
          ['Transfer-Encoding', 'chunked'],
        ],
        chunked,
      ),
    );
    expect(outcome.kind === 'response' ? [outcome.status, outcome.headers.get('content-type')] : outcome.kind).toEqual([
      413,
      'application/problem+json',
    ]);
    const header = await rawExchange(
      demo.url,
      rawRequest(
        'POST',
        '/v1/charges',
        [
          ['Authorization', AUTH],
          ['X-Big', 'a'.repeat(20_000)],
          ['Content-Length', '2'],
        ],
        '{}',
      ),
    );
    expect(header.kind === 'response' ? [header.status, header.headers.get('content-type')] : header.kind).toEqual([
      431,
      'application/problem+json',
    ]);
    expect(counts()).toEqual(before);
  });

  it('odd but valid HTTP is served: HTTP/1.0, Expect: 100-continue, absolute-form targets; a missing or invalid Host is a 400 problem', async () => {
    const body = '{"amount":4343}';
    const valid = [
      Buffer.from(
        `POST /v1/charges HTTP/1.0\r\nAuthorization: ${AUTH}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
      rawRequest(
        'POST',
        '/v1/charges',
        [
          ['Authorization', AUTH],
          ['Expect', '100-continue'],
          ['Content-Length', String(body.length)],
        ],
        body,
      ),
      rawRequest(
        'POST',
        'http://127.0.0.1/v1/charges',
        [
          ['Authorization', AUTH],
          ['Content-Length', String(body.length)],
        ],
        body,
      ),
      // Garbage after a complete request: the charge's own answer comes back, never a 400 for the garbage
      // written over it (which would hide a committed charge from a client that then charges again).
      rawRequest(
        'POST',
        '/v1/charges',
        [
          ['Authorization', AUTH],
          ['Content-Length', String(body.length)],
        ],
        `${body}GARBAGE\r\n\r\n`,
      ),
      rawRequest(
        'POST',
        '/v1/charges',
        [
          ['Authorization', AUTH],
          ['Idempotency-Key', randomUUID()],
          ['Content-Length', String(body.length)],
        ],
        `${body}\u0000\u0001`,
      ),
    ];
    for (const request of valid) {
      const before = counts();
      const outcome = await rawExchange(demo.url, request);
      expect(outcome.kind === 'response' ? outcome.status : outcome.kind).toBe(201);
      expect(counts().charges - before.charges).toBe(1);
    }
    const invalid = [
      Buffer.from(
        `POST /v1/charges HTTP/1.1\r\nAuthorization: ${AUTH}\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
      Buffer.from(
        `POST /v1/charges HTTP/1.1\r\nHost: a b\r\nAuthorization: ${AUTH}\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
      Buffer.from(
        `POST /v1/charges HTTP/1.1\r\nHost: [\r\nAuthorization: ${AUTH}\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
      Buffer.from(
        `POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1/v1/balance#\r\nAuthorization: ${AUTH}\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
      Buffer.from(
        `POST /v1/charges HTTP/1.1\r\nHost: a\r\nHost: b\r\nAuthorization: ${AUTH}\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
      Buffer.from(
        `POST /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: ${AUTH}\r\nIdempotency-Key: abc\r\n def\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
      Buffer.from('\u0000\u0001\u0002hello\r\n\r\n', 'latin1'),
    ];
    for (const request of invalid) {
      const before = counts();
      const outcome = await rawExchange(demo.url, request);
      expect(
        outcome.kind === 'response' ? [outcome.status, outcome.headers.get('content-type')] : outcome.kind,
      ).toEqual([400, 'application/problem+json']);
      expect(counts()).toEqual(before);
    }
    // The Host header never routes a request: an unlisted one is refused (421) before any route is looked at, and a
    // listed one with a path in it is not a Host.
    const routed = await rawExchange(
      demo.url,
      Buffer.from(
        `GET /v1/charges HTTP/1.1\r\nHost: balance.example\r\nAuthorization: ${AUTH}\r\nConnection: close\r\n\r\n`,
      ),
    );
    expect(routed.kind === 'response' ? [routed.status, routed.headers.get('content-type')] : routed.kind).toEqual([
      421,
      'application/problem+json',
    ]);
    const listed = await rawExchange(
      demo.url,
      Buffer.from(`GET /v1/charges HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${AUTH}\r\nConnection: close\r\n\r\n`),
    );
    expect(
      listed.kind === 'response'
        ? [listed.status, (JSON.parse(listed.body.toString()) as { object: string }).object]
        : listed.kind,
    ).toEqual([200, 'list']);
    // A charge id that is not valid percent-encoding is a charge that does not exist.
    for (const id of ['%E0%A4%A', '%', '%zz', '%C0%AF']) {
      const answer = await viaFetch(
        demo.url,
        'GET',
        `/v1/charges/${id}`,
        new Headers({ authorization: AUTH }),
        Buffer.alloc(0),
      );
      expect([id, answer.status, answer.contentType]).toEqual([id, 404, 'application/problem+json']);
    }
    expect((await fetch(`${demo.url}/healthz`)).status).toBe(200);
    expect(chargeOf(Buffer.from(body))).toEqual({ amount: 4343, currency: 'usd', source: 'tok_visa' });
  });
});

interface Answer {
  /** 0 when nothing came back: a hung or silently closed socket. */
  readonly status: number;
  readonly contentType: string | null;
  readonly body: string;
}

async function viaFetch(url: string, method: string, target: string, headers: Headers, body: Buffer): Promise<Answer> {
  try {
    const response = await fetch(`${url}${target}`, {
      method,
      headers,
      ...(method === 'GET' || method === 'HEAD' ? {} : { body: body as Uint8Array<ArrayBuffer> }),
      redirect: 'manual',
      signal: AbortSignal.timeout(10_000),
    });
    return { status: response.status, contentType: response.headers.get('content-type'), body: await response.text() };
  } catch (error) {
    // fetch refusing to build the request is the generator's fault, not the server's: fail loudly either way.
    return { status: 0, contentType: null, body: String((error as Error).cause ?? error) };
  }
}

/** A control character other than HTAB: the HTTP parser refuses it in a header value. */
function hasControl(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if ((code < 0x20 && code !== 0x09) || code === 0x7f) return true;
  }
  return false;
}

function fromRaw(outcome: RawOutcome): Answer {
  if (outcome.kind !== 'response') return { status: 0, contentType: null, body: outcome.kind };
  return {
    status: outcome.status,
    contentType: outcome.headers.get('content-type') ?? null,
    body: outcome.body.toString('utf8'),
  };
}

/** The path the server routes on: the target's path, dot segments resolved, as WHATWG URL parsing leaves it. */
function normalise(target: string): string {
  if (!target.startsWith('/')) {
    try {
      const url = new URL(target);
      return url.pathname + url.search;
    } catch {
      return target;
    }
  }
  const url = new URL(`http://localhost${target}`);
  return url.pathname + url.search;
}
