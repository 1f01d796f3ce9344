/**
 * `idem/otel` with the OpenTelemetry SDK's in-memory exporter and its AsyncLocalStorage context manager, around
 * `idem/http` on a real SQLite file (and PostgreSQL for overlapping requests): exact span names, attributes and
 * parents, no key or body in any attribute, and round trips counted per span even when calls overlap.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { context, SpanStatusCode } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordPk } from '../core/key.js';
import type { IdempotencyStore } from '../core/record.js';
import { idempotency } from '../http/middleware.js';
import { postgresStore } from '../stores/postgres/index.js';
import { sqliteStore } from '../stores/sqlite/index.js';
import { POSTGRES_URL, serviceAvailable } from '../../../../test/services.js';
import { idemTracing, keyHash } from './index.js';

const pgAvailable = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const SCOPE = 'acct_otel';
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('idem-test');
const dir = mkdtempSync(join(tmpdir(), 'idem-otel-'));

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
afterAll(async () => {
  context.disable();
  await provider.shutdown();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs one request the way an instrumented HTTP server does: inside its own active span. */
function served(handle: (request: Request) => Promise<Response>) {
  return (key: string, body: object) =>
    tracer.startActiveSpan('POST /v1/charges', async (span) => {
      try {
        const response = await handle(
          new Request('http://api.test/v1/charges', {
            method: 'POST',
            headers: { 'idempotency-key': key, 'content-type': 'application/json' },
            body: JSON.stringify(body),
          }),
        );
        return { status: response.status, text: await response.text(), spanId: span.spanContext().spanId };
      } finally {
        span.end();
      }
    });
}

const spansOf = (spanId: string): ReadableSpan[] =>
  exporter.getFinishedSpans().filter((s) => s.parentSpanContext?.spanId === spanId);
const view = (span: ReadableSpan) => ({ name: span.name, attributes: span.attributes });
const requestSpan = (spanId: string): ReadableSpan | undefined =>
  exporter.getFinishedSpans().find((s) => s.spanContext().spanId === spanId);

describe('idem/otel on SQLite', () => {
  const tracing = idemTracing({ tracer });
  const sqlite = sqliteStore({
    database: new Database(join(dir, 'idem.db')),
    closeDatabase: true,
    onRoundTrip: tracing.onRoundTrip,
  });
  const store = tracing.store(sqlite);
  let release = (): void => {};
  let announce = (): void => {};
  const protect = idempotency({ store, scope: 'single-tenant', leaseMs: 300, onEvent: tracing.onEvent });
  const handle = protect(async (request, { id }) => {
    const body = (await request.json()) as { card: string; hold?: boolean };
    if (body.hold) {
      announce();
      await new Promise<void>((resolve) => (release = resolve));
    }
    return Response.json({ id: `ch_${id.slice(0, 8)}` }, { status: 201 });
  });
  /** The keys this suite sent, to look for in the spans. */
  const used: string[] = [];
  const send = served(handle);
  const post = (key: string, body: object) => {
    if (!used.includes(key)) used.push(key);
    return send(key, body);
  };

  beforeAll(async () => {
    await sqlite.migrate();
  });
  afterAll(async () => store.close());

  it('keeps the store as it was: its own members work through the traced one', () => {
    expect([store.database, store.name, typeof store.migrate]).toEqual([sqlite.database, 'sqlite', 'function']);
  });

  it('a new key: a claim span and a completion span under the request span; the request span says executed', async () => {
    exporter.reset();
    const key = randomUUID();
    const answer = await post(key, { card: '4242 4242 4242 4242' });
    const id = (await sqlite.get(`IDEMPOTENCY#single-tenant#${key}`))?.id;
    const about = { 'idem.store': 'sqlite', 'idem.scope': 'single-tenant', 'idem.key_hash': keyHash(key) };
    expect(answer.status).toBe(201);
    expect(spansOf(answer.spanId).map(view)).toEqual([
      {
        name: 'idem.claim',
        attributes: { ...about, 'idem.decision': 'claimed', 'idem.record_id': id, 'idem.round_trips': 1 },
      },
      {
        name: 'idem.complete',
        attributes: {
          ...about,
          'idem.outcome': 'succeeded',
          'idem.effects': false,
          'idem.response_status': 201,
          'idem.written': true,
          'idem.round_trips': 1,
        },
      },
    ]);
    expect(requestSpan(answer.spanId)?.attributes).toEqual({
      'idem.scope': 'single-tenant',
      'idem.key_hash': keyHash(key),
      'idem.record_id': id,
      'idem.decision': 'executed',
      'idem.outcome': 'succeeded',
    });
  });

  it('replay, mismatch, in flight, and the renewals of a held lease: one span each with its decision', async () => {
    exporter.reset();
    const key = randomUUID();
    const first = await post(key, { card: '4242' });
    const replay = await post(key, { card: '4242' });
    const mismatch = await post(key, { card: '5555' });
    const held = randomUUID();
    const started = new Promise<void>((resolve) => (announce = resolve));
    const running = post(held, { card: '4242', hold: true });
    await started;
    const duplicate = await post(held, { card: '4242', hold: true });
    // The lease (300 ms) is renewed every 100 ms while the work runs: wait for a renewal's span, then let it finish.
    await expect
      .poll(() => exporter.getFinishedSpans().filter((s) => s.name === 'idem.renew').length, {
        timeout: 5_000,
        interval: 20,
      })
      .toBeGreaterThan(0);
    release();
    const done = await running;
    const id = (await sqlite.get(`IDEMPOTENCY#single-tenant#${key}`))?.id;
    const heldId = (await sqlite.get(`IDEMPOTENCY#single-tenant#${held}`))?.id;
    const decision = (spanId: string) => [
      spansOf(spanId).find((s) => s.name === 'idem.claim')?.attributes['idem.decision'],
      requestSpan(spanId)?.attributes['idem.decision'],
    ];
    expect([first.status, replay.status, mismatch.status, duplicate.status, done.status]).toEqual([
      201, 201, 400, 409, 201,
    ]);
    expect([decision(replay.spanId), decision(mismatch.spanId), decision(duplicate.spanId)]).toEqual([
      ['replayed', 'replayed'],
      ['mismatch', 'mismatch'],
      ['in_flight', 'in_flight'],
    ]);
    expect(
      spansOf(replay.spanId).map((s) => [s.name, s.attributes['idem.record_id'], s.attributes['idem.round_trips']]),
    ).toEqual([['idem.claim', id, 1]]);
    const renewal = exporter.getFinishedSpans().find((s) => s.name === 'idem.renew');
    expect([renewal?.parentSpanContext?.spanId, renewal?.attributes]).toEqual([
      done.spanId,
      {
        'idem.store': 'sqlite',
        'idem.scope': 'single-tenant',
        'idem.key_hash': keyHash(held),
        'idem.written': true,
        'idem.round_trips': 1,
      },
    ]);
    expect(spansOf(duplicate.spanId).find((s) => s.name === 'idem.claim')?.attributes['idem.record_id']).toBe(heldId);
  });

  it('never puts a key or a body in a span: attributes, events and status hold hashes and names only', () => {
    const text = JSON.stringify(exporter.getFinishedSpans().map((s) => [s.name, s.attributes, s.events, s.status]));
    expect(used.length).toBe(3);
    for (const secret of [...used, '4242', '5555', 'card', 'IDEMPOTENCY#']) expect(text).not.toContain(secret);
  });
});

describe('idem/otel when the store fails', () => {
  it('the span is an ERROR with the error name and code only; the request span says refused STORE_UNAVAILABLE', async () => {
    exporter.reset();
    const tracing = idemTracing({ tracer });
    const key = randomUUID();
    const broken: IdempotencyStore<never> = {
      name: 'broken',
      roundTrips: 0,
      claim: async (request) => {
        throw Object.assign(new Error(`duplicate key value (pk)=(${request.pk})`), { code: '23505' });
      },
      complete: async () => ({ ok: true }),
      renew: async () => ({ ok: true }),
      release: async () => ({ ok: true }),
      get: async () => null,
      sweep: async () => 0,
      list: async () => [],
      close: async () => {},
    };
    const handle = idempotency<never>({
      store: tracing.store(broken),
      scope: 'single-tenant',
      onEvent: tracing.onEvent,
    })(async () => new Response('x'));
    const answer = await served(handle)(key, { amount: 1 });
    const [claim] = spansOf(answer.spanId);
    expect(answer.status).toBe(503);
    expect([claim?.name, claim?.status, claim?.attributes]).toEqual([
      'idem.claim',
      { code: SpanStatusCode.ERROR, message: 'Error 23505' },
      { 'idem.store': 'broken', 'idem.scope': 'single-tenant', 'idem.key_hash': keyHash(key), 'error.type': '23505' },
    ]);
    expect(requestSpan(answer.spanId)?.attributes).toEqual({
      'idem.decision': 'refused',
      'idem.refused_reason': 'STORE_UNAVAILABLE',
    });
    expect(JSON.stringify(exporter.getFinishedSpans().map((s) => [s.attributes, s.status, s.events]))).not.toContain(
      key,
    );
  });
});

describe('idem/otel when the tracing itself throws', () => {
  it.each([
    ['every idem span fails to start (a span processor throws)', (name: string) => name.startsWith('idem.'), false],
    ['only the completion span fails to start', (name: string) => name === 'idem.complete', false],
    ['hashKey throws', () => false, true],
  ] as const)(
    '%s: the payment runs once, is recorded, and the retry replays it',
    async (_case, throwsOn, hashThrows) => {
      const bug = (): never => {
        throw new Error('telemetry bug');
      };
      const failing = new BasicTracerProvider({
        spanProcessors: [
          {
            onStart: (span) => void (throwsOn(span.name) && bug()),
            onEnd: () => {},
            forceFlush: async () => {},
            shutdown: async () => {},
          },
        ],
      });
      const tracing = idemTracing({ tracer: failing.getTracer('broken'), ...(hashThrows ? { hashKey: bug } : {}) });
      const sqlite = sqliteStore({
        database: new Database(join(dir, `${randomUUID()}.db`)),
        closeDatabase: true,
        onRoundTrip: tracing.onRoundTrip,
      });
      await sqlite.migrate();
      let runs = 0;
      const handle = idempotency({ store: tracing.store(sqlite), scope: 'single-tenant', onEvent: tracing.onEvent })(
        async () => {
          runs++;
          return Response.json({ id: `ch_${runs}` }, { status: 201 });
        },
      );
      const send = served(handle);
      const key = randomUUID();
      const first = await send(key, { amount: 1 });
      const retry = await send(key, { amount: 1 });
      const record = await sqlite.get(recordPk('single-tenant', key));
      expect([first.status, first.text, retry.status, retry.text, runs, record?.status]).toEqual([
        201,
        '{"id":"ch_1"}',
        201,
        '{"id":"ch_1"}',
        1,
        'succeeded',
      ]);
      await sqlite.close();
    },
  );
});

describe.skipIf(!pgAvailable)('idem/otel on PostgreSQL', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 10 });
  const schema = `idem_otel_${randomBytes(5).toString('hex')}`;
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('counts each span’s own round trips while 8 requests overlap', async () => {
    const tracing = idemTracing({ tracer });
    const store = tracing.store(postgresStore({ pool, schema, onRoundTrip: tracing.onRoundTrip }));
    await store.migrate();
    exporter.reset();
    const handle = idempotency({ store, scope: () => SCOPE, onEvent: tracing.onEvent })(async () =>
      Response.json({ ok: true }, { status: 201 }),
    );
    const answers = await Promise.all(Array.from({ length: 8 }, () => served(handle)(randomUUID(), { amount: 1 })));
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(201));
    const perRequest = answers.map((a) =>
      spansOf(a.spanId).map((s) => [s.name, s.attributes['idem.store'], s.attributes['idem.round_trips']]),
    );
    expect(perRequest).toEqual(
      Array(8).fill([
        ['idem.claim', 'postgres', 1],
        ['idem.complete', 'postgres', 1],
      ]),
    );
  });
});
