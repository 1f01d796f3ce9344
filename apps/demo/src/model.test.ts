/**
 * The model page's API in-process, on the memory store (which reports its round trips): each operation returns
 * the store's real answer with exactly its own trips, even when other operations run at the same time.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { recordPk, type IdempotencyStore } from 'idem';
import { memoryStore } from 'idem/stores/memory';
import { postgresStore } from 'idem/stores/postgres';
import { sqliteStore } from 'idem/stores/sqlite';
import { POSTGRES_URL, serviceAvailable } from '../../../test/services.js';
import { modelRoutes, tripRecorder } from './model.js';

const ACCOUNT = 'acct_lab_modeltest0001';
const SCOPE = `${ACCOUNT}/model`;

interface Row {
  readonly key: string;
  readonly status: string;
  readonly token: string;
  readonly id: string;
  readonly resultId: string | null;
  readonly responseStatus: number | null;
  readonly retryable: boolean | null;
  readonly expiresAt: number;
}

interface Trip {
  readonly op: string;
  readonly request: { readonly key?: string };
  readonly response: { readonly kind?: string; readonly response?: { readonly body?: unknown } };
}

/** The union of what the model routes answer, loosely: each test reads the fields its route returns. */
interface Body {
  readonly operation: string;
  readonly traced: boolean;
  readonly roundTrips: number;
  readonly trips: Trip[];
  readonly result: { readonly kind?: string; readonly record: Row; readonly ok?: boolean } & Row;
  readonly pk: string;
  readonly key: string;
  readonly record: Row;
  readonly expired: boolean | null;
  readonly winners: number;
  readonly barrier: boolean;
  readonly claims: Array<{
    readonly verdict: string;
    readonly roundTrips: number;
    readonly trips: Trip[];
    readonly refusedBy?: {
      readonly trip: number;
      readonly statement: number | null;
      readonly by: string;
      readonly text: string;
      readonly condition: string | null;
    };
  }>;
  readonly rows: Array<{ readonly key: string; readonly record: Row }>;
  readonly attributes: { readonly fields: Array<{ readonly name: string; readonly type: string }> };
  readonly type: string;
  readonly param: string;
}

function setup(
  now: () => number = Date.now,
  open: (observer: {
    onRoundTrip: ReturnType<typeof tripRecorder>['onRoundTrip'];
  }) => IdempotencyStore<unknown> = memoryStore,
) {
  const trips = tripRecorder();
  const store = open({ onRoundTrip: trips.onRoundTrip });
  const routes = modelRoutes({ store, trips, ttlMs: 86_400_000, now });
  const call = async (method: string, path: string, body?: unknown, account = ACCOUNT) => {
    const request = new Request(`http://lab.test${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const response = await routes(request, account);
    if (!response) throw new Error(`no route for ${method} ${path}`);
    return { status: response.status, body: (await response.json()) as Body };
  };
  return { store, trips, call };
}

describe('model API', () => {
  it('claim, complete, read: each answers with its own single round trip and the raw store reply', async () => {
    const { call } = setup();
    const claim = await call('POST', '/v1/model/claim', { key: 'k1' });
    expect([
      claim.status,
      claim.body.operation,
      claim.body.traced,
      claim.body.roundTrips,
      claim.body.trips.length,
    ]).toEqual([200, 'claim', true, 1, 1]);
    expect([claim.body.result.kind, claim.body.result.record.status, claim.body.pk]).toEqual([
      'claimed',
      'in_progress',
      recordPk(SCOPE, 'k1'),
    ]);
    expect(claim.body.trips[0]?.op).toBe('claim');
    const token = claim.body.result.record.token;

    const stale = await call('POST', '/v1/model/complete', { key: 'k1', token: 'not-the-token', outcome: 'succeeded' });
    expect([stale.body.result, stale.body.roundTrips]).toEqual([{ ok: false }, 1]);
    const done = await call('POST', '/v1/model/complete', { key: 'k1', token, outcome: 'succeeded', resultId: 'ch_1' });
    expect([done.body.result, done.body.roundTrips]).toEqual([{ ok: true }, 1]);

    const read = await call('GET', '/v1/model/read?key=k1');
    expect([
      read.body.result.status,
      read.body.result.resultId,
      read.body.result.responseStatus,
      read.body.expired,
      read.body.roundTrips,
    ]).toEqual(['succeeded', 'ch_1', 201, false, 1]);
    // The raw reply carries the stored response body as bytes, shown as their length and text.
    expect(read.body.trips[0]?.response.response?.body).toEqual({
      bytes: 46,
      text: '{"id":"ch_1","object":"charge","amount":50000}',
    });

    const again = await call('POST', '/v1/model/claim', { key: 'k1' });
    expect([again.body.result.kind, again.body.result.record.status, again.body.roundTrips]).toEqual([
      'existing',
      'succeeded',
      1,
    ]);
  });

  it('race: two claims of one fresh key, exactly one winner, each with its own trip', async () => {
    const { call } = setup();
    const race = await call('POST', '/v1/model/race');
    expect([race.body.winners, race.body.barrier]).toEqual([1, false]);
    expect(race.body.claims.map((c) => c.verdict).sort()).toEqual(['lost', 'won']);
    expect(race.body.claims.map((c) => [c.roundTrips, c.trips.length])).toEqual([
      [1, 1],
      [1, 1],
    ]);
    const lost = race.body.claims.find((c) => c.verdict === 'lost');
    expect(lost?.trips[0]?.response.kind).toBe('existing');
    expect([lost?.refusedBy?.by, lost?.refusedBy?.condition]).toEqual(['step', null]);
  });

  it("race on SQLite: both claims read before either writes, so the loser is refused by the upsert's WHERE", async () => {
    const database = new Database(':memory:');
    const { store, call } = setup(Date.now, (observer) => sqliteStore({ database, ...observer }));
    await (store as ReturnType<typeof sqliteStore>).migrate();
    for (let round = 0; round < 3; round++) {
      const race = await call('POST', '/v1/model/race');
      expect([race.body.winners, race.body.barrier]).toEqual([1, true]);
      const won = race.body.claims.find((c) => c.verdict === 'won');
      const lost = race.body.claims.find((c) => c.verdict === 'lost');
      // Each: one trip that reads and finds nothing, then one that writes (the loser's write returns no row and reads).
      const shape = (trips: Trip[] = []) =>
        trips.map((t) =>
          (t as unknown as { request: { statements: Array<{ sql: string }> } }).request.statements.map(
            (st) => st.sql.trim().split(/\s/)[0],
          ),
        );
      expect(shape(won?.trips)).toEqual([['SELECT'], ['INSERT']]);
      expect(shape(lost?.trips)).toEqual([['SELECT'], ['INSERT', 'SELECT']]);
      expect((lost?.trips[1] as unknown as { response: unknown[][] }).response.map((rows) => rows.length)).toEqual([
        0, 1,
      ]);
      expect([lost?.refusedBy?.by, lost?.refusedBy?.trip, lost?.refusedBy?.statement]).toEqual(['write', 2, 1]);
      expect(lost?.refusedBy?.condition).toMatch(
        /^WHERE \("idem_records"\."expires_at" <= @now\s+OR \("idem_records"\."fingerprint" = excluded\."fingerprint"/,
      );
    }
    database.close();
  });

  it('seeds four rows (succeeded, failed final, failed retryable, in_progress); a second seeding leaves them as they are', async () => {
    const { call } = setup();
    for (let round = 0; round < 2; round++) {
      const seeded = await call('POST', '/v1/model/seed');
      expect(
        seeded.body.rows.map((r) => [r.key, r.record.status, r.record.retryable, r.record.responseStatus]),
      ).toEqual([
        ['seed-succeeded', 'succeeded', null, 201],
        ['seed-failed', 'failed', false, 402],
        ['seed-failed-retryable', 'failed', true, 503],
        ['seed-in-progress', 'in_progress', null, null],
      ]);
    }
    const info = await call('GET', '/v1/model');
    expect(info.body.attributes.fields.map((f) => [f.name, f.type])).toEqual([
      ['pk', 'string'],
      ['scope', 'string'],
      ['key', 'string'],
      ['status', 'string'],
      ['fingerprint', 'string'],
      ['id', 'string'],
      ['token', 'string'],
      ['claimedAt', 'number'],
      ['leaseExpiresAt', 'number'],
      ['expiresAt', 'number'],
      ['retryable', 'boolean'],
      ['resultId', 'string'],
      ['responseStatus', 'number'],
      ['responseHeaders', 'array'],
      ['responseBody', 'Uint8Array'],
    ]);
  });

  it('an expired row counts as absent to the claim: claimed afresh with a new record id', async () => {
    let clock = 1_800_000_000_000;
    const { call } = setup(() => clock);
    const made = await call('POST', '/v1/model/expiring');
    const { key, record } = made.body;
    expect(record.expiresAt).toBe(clock + 10_000);
    clock += 9_999;
    expect((await call('POST', '/v1/model/claim', { key })).body.result.kind).toBe('existing');
    clock += 1;
    const read = await call('GET', `/v1/model/read?key=${key}`);
    expect([read.body.result.status, read.body.expired]).toEqual(['succeeded', true]);
    const claimed = await call('POST', '/v1/model/claim', { key });
    expect(claimed.body.result.kind).toBe('claimed');
    expect(claimed.body.result.record.id).not.toBe(record.id);
  });

  it('concurrent operations never see each other trips', async () => {
    const { call } = setup();
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => call('POST', '/v1/model/claim', { key: `c${i}` })),
    );
    expect(results.map((r) => [r.body.roundTrips, r.body.trips[0]?.request.key])).toEqual(
      Array.from({ length: 20 }, (_, i) => [1, `c${i}`]),
    );
  });

  it('refuses accounts that are not lab sandboxes, and bad input', async () => {
    const { call } = setup();
    const other = await call('POST', '/v1/model/claim', { key: 'k' }, 'acct_alice');
    expect([other.status, other.body.type]).toEqual([403, 'urn:idem:problem:lab-account-required']);
    expect((await call('POST', '/v1/model/claim', { key: '' })).body.param).toBe('key');
    expect((await call('POST', '/v1/model/claim', { key: 'k', ttlMs: 10 })).body.param).toBe('ttlMs');
    expect((await call('POST', '/v1/model/complete', { key: 'k', token: 't', outcome: 'maybe' })).body.param).toBe(
      'outcome',
    );
    expect((await call('GET', '/v1/model/claim')).status).toBe(405);
  });
});

const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);

describe.skipIf(!postgres)('model API race on PostgreSQL', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL });
  const schema = `model_race_${process.pid}_${Date.now()}`;
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('both claims take their snapshot before the winner commits: the loser is refused by DO UPDATE … WHERE', async () => {
    const { store, call } = setup(Date.now, (observer) => postgresStore({ pool, schema, ...observer }));
    await (store as ReturnType<typeof postgresStore>).migrate();
    for (let round = 0; round < 3; round++) {
      const race = await call('POST', '/v1/model/race');
      expect([race.body.winners, race.body.barrier]).toEqual([1, true]);
      // The claims' own statements only: the barrier's pg_stat_activity polls are no part of a claim.
      expect(race.body.claims.map((c) => [c.verdict, c.roundTrips, c.trips.length]).sort()).toEqual([
        ['lost', 4, 4],
        ['won', 3, 3],
      ]);
      const lost = race.body.claims.find((c) => c.verdict === 'lost');
      const claimRows = (lost?.trips ?? [])
        .map((t) => t as unknown as { request: { text: string }; response: { rows: unknown[] } })
        .filter((t) => t.request.text.startsWith('WITH cur'))
        .map((t) => t.response.rows.length);
      // The first statement wrote nothing and returned nothing; sent again, it read the winner's row.
      expect(claimRows).toEqual([0, 1]);
      expect([lost?.refusedBy?.by, lost?.refusedBy?.statement]).toEqual(['write', null]);
      expect(lost?.refusedBy?.condition).toMatch(/^WHERE \(r\.expires_at <= \$7::bigint/);
    }
  });
});
