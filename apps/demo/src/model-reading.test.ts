/**
 * The model API's readings on real stores (memory, SQLite, and PostgreSQL and Redis when they are up): every
 * transition of the state machine, made by the contract's own operations under an injected clock, is named from
 * the store's answer and the rows before and after; a write that changed nothing never says it wrote.
 */
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from 'idem';
import { memoryStore } from 'idem/stores/memory';
import { postgresStore } from 'idem/stores/postgres';
import { redisStore } from 'idem/stores/redis';
import { sqliteStore } from 'idem/stores/sqlite';
import { POSTGRES_URL, REDIS_URL, serviceAvailable } from '../../../test/services.js';
import { modelRoutes, tripRecorder } from './model.js';

const ACCOUNT = 'acct_lab_readingtest01';
const T0 = 1_800_000_000_000;

interface Answer {
  readonly status: number;
  readonly reading: { verdict: string; transition: string | null; from: string; to: string; text: string };
  readonly result: { kind?: string; ok?: boolean; record?: { token: string; id: string } };
  readonly before: { id: string; status: string } | null;
  readonly after: { id: string; status: string } | null;
  readonly stored: boolean | null;
  readonly param?: string;
  readonly rows: Array<{ key: string; record: { claimedAt: number; leaseExpiresAt: number; expiresAt: number } }>;
  readonly record: { claimedAt: number; leaseExpiresAt: number; expiresAt: number };
}

const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const redis = await serviceAvailable('Redis', REDIS_URL);
const pool = postgres ? new pg.Pool({ connectionString: POSTGRES_URL }) : null;
const client = redis ? new Redis(REDIS_URL) : null;
const schema = `model_reading_${process.pid}_${Date.now()}`;
const prefix = `model-reading-${process.pid}-${Date.now()}:`;
afterAll(async () => {
  await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool?.end();
  const keys = (await client?.keys(`${prefix}*`)) ?? [];
  if (keys.length > 0) await client?.del(...keys);
  client?.disconnect();
});

type Open = (onRoundTrip: ReturnType<typeof tripRecorder>['onRoundTrip']) => Promise<IdempotencyStore<unknown>>;
const STORES: ReadonlyArray<{ name: string; skip: boolean; open: Open }> = [
  { name: 'memory', skip: false, open: async (onRoundTrip) => memoryStore({ onRoundTrip }) },
  {
    name: 'sqlite',
    skip: false,
    open: async (onRoundTrip) => {
      const store = sqliteStore({ database: new Database(':memory:'), onRoundTrip });
      await store.migrate();
      return store;
    },
  },
  {
    name: 'postgres',
    skip: !postgres,
    open: async (onRoundTrip) => {
      const store = postgresStore({ pool: pool as pg.Pool, schema, onRoundTrip });
      await store.migrate();
      return store;
    },
  },
  {
    name: 'redis',
    skip: !redis,
    open: async (onRoundTrip) => redisStore({ client: client as Redis, prefix, onRoundTrip }),
  },
];

describe.each(STORES)('model readings on $name', ({ name, skip, open }) => {
  let clock = T0;
  const routes = async () => {
    const trips = tripRecorder();
    return modelRoutes({ store: await open(trips.onRoundTrip), trips, ttlMs: 86_400_000, now: () => clock });
  };
  const caller = (handle: Awaited<ReturnType<typeof routes>>) => async (path: string, body?: unknown) => {
    const request = new Request(`http://lab.test${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const response = await handle(request, ACCOUNT);
    if (!response) throw new Error(`no route for ${path}`);
    return { ...((await response.json()) as Answer), status: response.status };
  };
  const said = (answer: Answer) => [
    answer.reading.verdict,
    answer.reading.transition,
    answer.reading.from,
    answer.reading.to,
  ];

  it.skipIf(skip)('walks every transition, each named from the store’s answer', async () => {
    clock = T0;
    const call = caller(await routes());
    const key = `walk-${name}-${Date.now()}`;
    const claimed = await call('/v1/model/claim', { key, leaseMs: 3_000 });
    expect(said(claimed)).toEqual(['written', 'fresh-claim', 'absent', 'in_progress']);
    const first = claimed.result.record?.token ?? '';
    const id = claimed.result.record?.id ?? '';

    clock += 1_000;
    expect(said(await call('/v1/model/claim', { key }))).toEqual(['refused', null, 'in_progress', 'in_progress']);
    const renewed = await call('/v1/model/renew', { key, token: first, leaseMs: 3_000 });
    expect(said(renewed)).toEqual(['written', 'renew', 'in_progress', 'in_progress']);
    expect(renewed.reading.text).toBe(
      'renewed: the lease now runs for another 3.0 s (leaseExpiresAt 1.0 s later), same token, same id.',
    );

    // The holder stops renewing (a crash): once its lease has lapsed, a retry takes the key over with the same id.
    clock += 3_000;
    const taken = await call('/v1/model/claim', { key, leaseMs: 3_000 });
    expect(said(taken)).toEqual(['written', 'takeover', 'in_progress', 'in_progress']);
    expect(taken.result.record?.id).toBe(id);
    const late = await call('/v1/model/complete', { key, token: first, outcome: 'succeeded' });
    expect([late.result.ok, ...said(late)]).toEqual([false, 'refused', null, 'in_progress', 'in_progress']);
    expect(late.reading.text).toBe(
      'refused: nothing written. The row is in_progress under another token: the key was taken over, and only its current holder may write.',
    );

    const second = taken.result.record?.token ?? '';
    const failed = await call('/v1/model/complete', { key, token: second, outcome: 'failed-retryable' });
    expect(said(failed)).toEqual(['written', 'fail-retryable', 'in_progress', 'failed-retryable']);
    const reclaimed = await call('/v1/model/claim', { key });
    expect([...said(reclaimed), reclaimed.result.record?.id]).toEqual([
      'written',
      'reclaim',
      'failed-retryable',
      'in_progress',
      id,
    ]);
    const third = reclaimed.result.record?.token ?? '';
    expect(said(await call('/v1/model/release', { key, token: third }))).toEqual([
      'written',
      'release',
      'in_progress',
      'absent',
    ]);
    const read = await call(`/v1/model/read?key=${key}`);
    expect([read.stored, read.reading.text]).toEqual([false, 'no row: the store holds nothing under this key.']);

    const again = await call('/v1/model/claim', { key, ttlMs: 10_000, leaseMs: 5_000 });
    expect(said(again)).toEqual(['written', 'fresh-claim', 'absent', 'in_progress']);
    const token = again.result.record?.token ?? '';
    expect(said(await call('/v1/model/complete', { key, token, outcome: 'failed-final' }))).toEqual([
      'written',
      'fail-final',
      'in_progress',
      'failed-final',
    ]);
    expect(said(await call('/v1/model/claim', { key }))).toEqual(['refused', null, 'failed-final', 'failed-final']);
  });

  it.skipIf(skip)('a second completion with the same token never says it wrote', async () => {
    clock = T0;
    const call = caller(await routes());
    const key = `twice-${name}-${Date.now()}`;
    const token = (await call('/v1/model/claim', { key })).result.record?.token ?? '';
    expect(said(await call('/v1/model/complete', { key, token, outcome: 'succeeded' }))).toEqual([
      'written',
      'complete',
      'in_progress',
      'succeeded',
    ]);
    const again = await call('/v1/model/complete', { key, token, outcome: 'succeeded' });
    // Redis (a resent write) answers ok; SQL and memory answer not ok. Either way the row did not change.
    expect([again.result.ok, again.reading.verdict]).toEqual(
      name === 'redis' ? [true, 'nothing-written'] : [false, 'refused'],
    );
    expect(again.before).toEqual(again.after);
    expect(again.reading.text).toBe(
      name === 'redis'
        ? 'nothing written: the store answered ok, but the row is unchanged: it was already succeeded under this token. Redis answers ok to a completion that finds its own token already settled with the same status: it takes the call for a resend of a write whose reply was lost.'
        : 'refused: nothing written. The row is already succeeded: its outcome is written once.',
    );
  });

  it.skipIf(skip || name === 'redis')(
    'an expired row: still stored, counted as absent, claimed with a new id',
    async () => {
      // (Redis expires its keys by its own clock, which this test does not move.)
      clock = T0;
      const call = caller(await routes());
      const made = await call('/v1/model/expiring', {});
      const key = (made as unknown as { key: string }).key;
      clock += 10_000;
      const read = await call(`/v1/model/read?key=${key}`);
      expect([read.stored, ...said(read)]).toEqual([true, 'read', 'expire', 'expired', 'expired']);
      expect(read.reading.text).toBe(
        'found: status succeeded, response 201; expired 0 ms ago and still stored: a claim treats it as absent.',
      );
      const claimed = await call('/v1/model/claim', { key });
      expect(said(claimed)).toEqual(['written', 'reclaim-expired', 'expired', 'in_progress']);
      expect(claimed.result.record?.id).not.toBe(claimed.before?.id);
    },
  );

  it.skipIf(skip)('every seeded row, and the expiring one, lives longer than its lease', async () => {
    clock = T0;
    const call = caller(await routes());
    const seeded = await call('/v1/model/seed', {});
    const expiring = await call('/v1/model/expiring', {});
    const spans = [...seeded.rows.map((r) => r.record), expiring.record].map((r) => [
      r.leaseExpiresAt - r.claimedAt,
      r.expiresAt - r.claimedAt,
    ]);
    expect(spans).toEqual([
      [60_000, 86_400_000],
      [60_000, 86_400_000],
      [60_000, 86_400_000],
      [3_600_000, 86_400_000],
      [5_000, 10_000],
    ]);
    const bad = await call('/v1/model/claim', { key: 'k', ttlMs: 2_000, leaseMs: 2_000 });
    expect([bad.status, bad.param]).toEqual([400, 'leaseMs']);
  });
});
