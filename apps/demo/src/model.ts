/**
 * @module The model page's API: the store's own contract operations (claim, complete, get), run for real against the
 * running store, each answered with the raw requests the store sent and what its engine replied (its `onRoundTrip`
 * reports), and the round trips it took. Lab mode only, on lab sandbox accounts only.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes, randomUUID } from 'node:crypto';
import type { ClaimRequest, IdempotencyRecord, IdempotencyStore, Outcome, RoundTrip } from 'idem';
import { fingerprint, isIdempotencyError, parseKey, recordPk } from 'idem';
import { problem } from 'idem/http';
import { postgresStore, type PostgresPool, type PostgresPoolClient } from 'idem/stores/postgres';
import { sqliteStore, type SqliteDatabase } from 'idem/stores/sqlite';

/** Round trips of one model operation, collected through `AsyncLocalStorage`, plus the store's own count. */
export interface TripRecorder {
  /** Give this to the store (`openBackend(config, { onRoundTrip })`): it files each trip under the current operation. */
  readonly onRoundTrip: (trip: RoundTrip) => void;
  /** Runs `fn`, collecting the round trips it causes (and nothing from concurrent requests). */
  record<T>(fn: () => Promise<T>): Promise<Recorded<T>>;
}

export interface Recorded<T> {
  readonly value?: T;
  readonly error?: unknown;
  readonly trips: readonly RoundTrip[];
}

/**
 * A recorder whose observer pushes each trip into the array of the operation that caused it.
 *
 * @example
 * const trips = tripRecorder()
 * const backend = await openBackend(config, { onRoundTrip: trips.onRoundTrip })
 * const { value, trips: sent } = await trips.record(() => backend.store.get(pk))
 */
export function tripRecorder(): TripRecorder {
  const current = new AsyncLocalStorage<RoundTrip[]>();
  return {
    onRoundTrip: (trip) => current.getStore()?.push(trip),
    async record<T>(fn: () => Promise<T>): Promise<Recorded<T>> {
      const trips: RoundTrip[] = [];
      return current.run(trips, async () => {
        try {
          return { value: await fn(), trips };
        } catch (error) {
          return { error, trips };
        }
      });
    },
  };
}

export interface ModelOptions {
  readonly store: IdempotencyStore<never> | IdempotencyStore<unknown>;
  readonly trips: TripRecorder;
  /** The records' TTL for claims that do not ask for a short one. */
  readonly ttlMs: number;
  /** The clock, epoch ms. Default `Date.now`. */
  readonly now?: () => number;
}

/** The shortest TTL a model claim may ask for. */
const MIN_TTL_MS = 1_000;
/** The expiry demonstration's TTL: long enough to read its output, short enough to wait out. */
const EXPIRING_TTL_MS = 10_000;
/** How long a race's claims wait at the barrier for each other before going on alone (a claim that failed early). */
const BARRIER_TIMEOUT_MS = 5_000;
/** Model claims hold their lease long enough to press "Record the outcome" by hand. */
const MODEL_LEASE_MS = 60_000;
/** The seeded in_progress row keeps its lease for an hour: it stays "in progress" while the page is open. */
const SEED_LEASE_MS = 3_600_000;
/** The lab's $500 charge: the model's claims carry the same fingerprint a real charge request would. */
const CHARGE_BODY = new TextEncoder().encode('{"amount":50000,"currency":"usd","source":"tok_visa"}');
const CHARGE_FINGERPRINT = fingerprint({
  method: 'POST',
  path: '/v1/charges',
  contentType: 'application/json',
  body: CHARGE_BODY,
});

const SEEDS = [
  { key: 'seed-succeeded', state: 'succeeded' },
  { key: 'seed-failed', state: 'failed-final' },
  { key: 'seed-failed-retryable', state: 'failed-retryable' },
  { key: 'seed-in-progress', state: 'in_progress' },
] as const;

const json = (body: unknown, status = 200): Response =>
  new Response(JSON.stringify(body, jsonSafe), {
    status,
    headers: { 'content-type': 'application/json', 'cache-control': 'no-store' },
  });

const badRequest = (detail: string, param: string): Response =>
  problem({ status: 400, slug: 'parameter-invalid', title: 'Invalid parameter', detail, extensions: { param } });

/**
 * The model routes under `/v1/model`, for `createApp({ model })`. Every operation is scoped to
 * `<account>/model`, so the model's rows never mix with the lab page's charges.
 *
 * | route | does |
 * |---|---|
 * | `GET /v1/model` | the store, the item's attributes with their stored types, the three patterns' engine operations |
 * | `POST /v1/model/seed` | stages four rows: succeeded, failed (final), failed (retryable), in_progress |
 * | `POST /v1/model/claim` `{ key, ttlMs? }` | Claim a request key: `store.claim` |
 * | `POST /v1/model/complete` `{ key, token, outcome, resultId? }` | Record the outcome: `store.complete` |
 * | `GET /v1/model/read?key=` | Read a previous outcome: `store.get` |
 * | `POST /v1/model/race` | two claims of a fresh key that both read before either writes; `refusedBy` names what refused the loser |
 * | `POST /v1/model/expiring` | a succeeded row with a 10 s TTL |
 *
 * @example
 * const model = modelRoutes({ store, trips, ttlMs: 86_400_000 })
 * const app = createApp({ ...config, ...backend, model })
 */
export function modelRoutes({
  store,
  trips,
  ttlMs,
  now = Date.now,
}: ModelOptions): (request: Request, account: string) => Promise<Response | undefined> {
  const contract = store as IdempotencyStore<unknown>;

  /** One contract call, with the trips it caused; `roundTrips` falls back to the store's counter when it reports none. */
  const run = async <T>(operation: string, fn: () => Promise<T>): Promise<RunResult<T>> => {
    const before = contract.roundTrips;
    const recorded = await trips.record(fn);
    const counted = contract.roundTrips - before;
    return {
      operation,
      traced: recorded.trips.length > 0,
      roundTrips: recorded.trips.length > 0 ? recorded.trips.length : counted,
      trips: recorded.trips,
      ...(recorded.error === undefined ? { value: recorded.value as T } : { error: describeError(recorded.error) }),
    };
  };

  const claimRequest = (
    scope: string,
    key: string,
    options: { ttlMs?: number; leaseMs?: number } = {},
  ): ClaimRequest => ({
    pk: recordPk(scope, key),
    scope,
    key,
    fingerprint: CHARGE_FINGERPRINT,
    token: randomUUID(),
    id: randomUUID(),
    now: now(),
    leaseMs: options.leaseMs ?? MODEL_LEASE_MS,
    ttlMs: options.ttlMs ?? ttlMs,
  });
  const claim = (scope: string, key: string, options: { ttlMs?: number; leaseMs?: number } = {}) =>
    contract.claim(claimRequest(scope, key, options));

  /**
   * The store to race on: for SQLite and PostgreSQL, a second store over the same database (or pool) and table
   * that waits at `claimBarrier` between its read and its write; any other store decides in one step and races as
   * it is.
   */
  const racing = (claimBarrier: (request: ClaimRequest) => Promise<void>): IdempotencyStore<unknown> => {
    const sqlite = store as { name: string; database?: SqliteDatabase; table?: string };
    if (store.name === 'sqlite' && sqlite.database && typeof sqlite.table === 'string') {
      return sqliteStore({
        database: sqlite.database,
        table: sqlite.table,
        onRoundTrip: trips.onRoundTrip,
        claimBarrier,
      });
    }
    const postgres = store as {
      name: string;
      pool?: PostgresPool<PostgresPoolClient>;
      schema?: string;
      table?: string;
    };
    if (
      store.name === 'postgres' &&
      postgres.pool &&
      typeof postgres.schema === 'string' &&
      typeof postgres.table === 'string'
    ) {
      return postgresStore({
        pool: postgres.pool,
        schema: postgres.schema,
        table: postgres.table,
        onRoundTrip: trips.onRoundTrip,
        claimBarrier,
      });
    }
    return contract;
  };

  const outcomeFor = (kind: string, resultId: string | null): Outcome | undefined => {
    const body = (status: number, value: unknown) => ({
      status,
      headers: [['content-type', 'application/json']] as const,
      body: new TextEncoder().encode(JSON.stringify(value)),
    });
    if (kind === 'succeeded') {
      return {
        status: 'succeeded',
        retryable: false,
        resultId,
        response: body(201, { id: resultId, object: 'charge', amount: 50000 }),
      };
    }
    if (kind === 'failed-final') {
      return {
        status: 'failed',
        retryable: false,
        resultId,
        response: body(402, { type: 'urn:idem:problem:card-declined', status: 402 }),
      };
    }
    if (kind === 'failed-retryable') {
      return {
        status: 'failed',
        retryable: true,
        resultId: null,
        response: body(503, { type: 'urn:idem:problem:processor-unavailable', status: 503 }),
      };
    }
    return undefined;
  };

  const complete = (scope: string, key: string, token: string, outcome: Outcome) =>
    contract.complete({ pk: recordPk(scope, key), token, now: now(), outcome });

  const describe = async (scope: string) => {
    // Read one seeded row to see how this store actually writes the item (DynamoDB's type descriptors, SQLite's columns).
    const seeded = await trips.record(() => contract.get(recordPk(scope, 'seed-succeeded')));
    return {
      store: store.name,
      scope,
      pk: {
        pattern: 'IDEMPOTENCY#<key>',
        stored: 'IDEMPOTENCY#<scope>#<key>',
        example: recordPk(scope, 'seed-succeeded'),
      },
      attributes: attributeTypes(store, seeded.trips, seeded.value ?? null),
      operations: OPERATIONS[store.name] ?? OPERATIONS.default,
      ttlMs,
      expiringTtlMs: EXPIRING_TTL_MS,
    };
  };

  const seed = async (scope: string) => {
    const results = [];
    for (const { key, state } of SEEDS) {
      const claimRun = await run('claim', () =>
        claim(scope, key, state === 'in_progress' ? { leaseMs: SEED_LEASE_MS } : {}),
      );
      const steps = [present(claimRun)];
      const claimed = claimRun.value;
      if (claimed?.kind === 'claimed' && state !== 'in_progress') {
        const outcome = outcomeFor(state, `ch_seed_${randomBytes(6).toString('hex')}`);
        steps.push(
          present(await run('complete', () => complete(scope, key, claimed.record.token, outcome as Outcome))),
        );
      }
      const read = await run('get', () => contract.get(recordPk(scope, key)));
      results.push({ key, state, record: read.value ? modelRecord(read.value) : null, steps });
    }
    return { rows: results };
  };

  return async (request, account) => {
    const url = new URL(request.url);
    const path = url.pathname;
    if (path !== '/v1/model' && !path.startsWith('/v1/model/')) return undefined;
    if (!account.startsWith('acct_lab_')) {
      return problem({
        status: 403,
        slug: 'lab-account-required',
        title: 'Lab sandbox account required',
        detail:
          'The model page runs store operations on lab sandbox accounts only: send `Authorization: Bearer sk_lab_<id>`.',
      });
    }
    const scope = `${account}/model`;
    const method = request.method;

    if (path === '/v1/model') return method === 'GET' ? json(await describe(scope)) : notAllowed('GET');
    if (path === '/v1/model/read') {
      if (method !== 'GET') return notAllowed('GET');
      const key = readKey(url.searchParams.get('key'));
      if (key instanceof Response) return key;
      const result = await run('get', () => contract.get(recordPk(scope, key)));
      const at = now();
      return json({
        ...present(result),
        key,
        pk: recordPk(scope, key),
        expired: result.value ? result.value.expiresAt <= at : null,
        now: at,
      });
    }
    if (method !== 'POST') return path.startsWith('/v1/model/') ? notAllowed('POST') : undefined;
    const body = await readJson(request);
    if (body instanceof Response) return body;

    switch (path) {
      case '/v1/model/seed':
        return json(await seed(scope));
      case '/v1/model/claim': {
        const key = readKey(body.key);
        if (key instanceof Response) return key;
        const ttl = body.ttlMs === undefined ? ttlMs : body.ttlMs;
        if (typeof ttl !== 'number' || !Number.isSafeInteger(ttl) || ttl < MIN_TTL_MS || ttl > ttlMs) {
          return badRequest(`\`ttlMs\` must be an integer from ${MIN_TTL_MS} to ${ttlMs}.`, 'ttlMs');
        }
        const result = await run('claim', () => claim(scope, key, { ttlMs: ttl }));
        return json({ ...present(result), key, pk: recordPk(scope, key), now: now() });
      }
      case '/v1/model/complete': {
        const key = readKey(body.key);
        if (key instanceof Response) return key;
        if (typeof body.token !== 'string' || body.token.length === 0 || body.token.length > 100) {
          return badRequest('`token` must be the token a claim returned.', 'token');
        }
        const resultId = body.resultId === undefined ? `ch_${randomBytes(8).toString('hex')}` : body.resultId;
        if (typeof resultId !== 'string' || !/^[A-Za-z0-9_]{1,64}$/.test(resultId)) {
          return badRequest('`resultId` must be 1-64 letters, digits or _.', 'resultId');
        }
        const outcome = outcomeFor(String(body.outcome), resultId);
        if (!outcome) return badRequest('`outcome` must be succeeded, failed-final or failed-retryable.', 'outcome');
        const token = body.token;
        const result = await run('complete', () => complete(scope, key, token, outcome));
        return json({ ...present(result), key, pk: recordPk(scope, key), outcome: body.outcome });
      }
      case '/v1/model/race': {
        // Two claims of one fresh key, started together. Where the store reads before it writes (SQLite,
        // PostgreSQL), both wait at a barrier once past the read, so both write and the loser meets the write's own
        // condition. Each claim is its own operation with its own trips.
        const key = `race-${randomBytes(6).toString('hex')}`;
        const racer = racing(barrier(2));
        const [a, b] = await Promise.all([
          run('claim', () => racer.claim(claimRequest(scope, key))),
          run('claim', () => racer.claim(claimRequest(scope, key))),
        ]);
        const claims = [a, b].map((result, i) => {
          const verdict =
            result.value?.kind === 'claimed' ? 'won' : result.value?.kind === 'existing' ? 'lost' : 'error';
          return {
            label: i === 0 ? 'A' : 'B',
            verdict,
            ...present(result),
            ...(verdict === 'lost' ? { refusedBy: refusedBy(store.name, result.trips) } : {}),
          };
        });
        return json({
          key,
          pk: recordPk(scope, key),
          barrier: racer !== contract,
          claims,
          winners: claims.filter((c) => c.verdict === 'won').length,
        });
      }
      case '/v1/model/expiring': {
        const key = `expiring-${randomBytes(6).toString('hex')}`;
        const claimed = await run('claim', () => claim(scope, key, { ttlMs: EXPIRING_TTL_MS }));
        const steps = [present(claimed)];
        if (claimed.value?.kind === 'claimed') {
          const token = claimed.value.record.token;
          steps.push(
            present(
              await run('complete', () =>
                complete(scope, key, token, outcomeFor('succeeded', `ch_${randomBytes(8).toString('hex')}`) as Outcome),
              ),
            ),
          );
        }
        const read = await run('get', () => contract.get(recordPk(scope, key)));
        return json({
          key,
          pk: recordPk(scope, key),
          ttlMs: EXPIRING_TTL_MS,
          record: read.value ? modelRecord(read.value) : null,
          steps,
          now: now(),
        });
      }
      default:
        return undefined;
    }
  };
}

/**
 * A barrier for `n` parties: each call resolves once `n` calls have been made (or after `BARRIER_TIMEOUT_MS`, so
 * one claim that failed before reaching it cannot hold the other forever).
 */
function barrier(n: number): (request: ClaimRequest) => Promise<void> {
  let arrived = 0;
  let open: () => void = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  return async () => {
    if (++arrived >= n) open();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([opened, new Promise<void>((resolve) => (timer = setTimeout(resolve, BARRIER_TIMEOUT_MS)))]);
    clearTimeout(timer);
  };
}

/** What refused a losing claim: the round trip (and SQL statement) that did, in words, and the condition's text. */
export interface Refusal {
  /** 1-based round trip of the claim. */
  readonly trip: number;
  /** 1-based statement within that trip (SQLite trips carry several), or null. */
  readonly statement: number | null;
  /** `write`: the conditional write's own condition refused it; `read`: a read found the row first (a shortcut). */
  /** What refused the loser: a conditional write's condition, a pre-read, or one in-process step (memory). */
  readonly by: 'write' | 'read' | 'step';
  readonly text: string;
  /** The condition as it appears in the request shown, for the page to mark; null when there is no text to mark. */
  readonly condition: string | null;
}

/** The `WHERE` just before `RETURNING` in an upsert: the condition a conflicting row must meet to be overwritten. */
function upsertCondition(sql: string): string | null {
  const returning = sql.lastIndexOf('RETURNING');
  const where = sql.lastIndexOf('WHERE', returning);
  return returning > 0 && where > 0 ? sql.slice(where, returning).trim() : null;
}

/**
 * Reads a losing claim's round trips and says which statement refused it, by store.
 *
 * @example
 * refusedBy('sqlite', trips) // → { trip: 2, statement: 1, by: 'write', text: 'Round trip 2, statement 1 …', condition: 'WHERE …' }
 */
export function refusedBy(storeName: string, trips: readonly RoundTrip[]): Refusal | null {
  const rows = (value: unknown): unknown[] | null =>
    Array.isArray(value)
      ? value
      : Array.isArray((value as { rows?: unknown } | null)?.rows)
        ? (value as { rows: unknown[] }).rows
        : null;
  for (const [i, trip] of trips.entries()) {
    const n = i + 1;
    if (storeName === 'sqlite') {
      const statements = (trip.request as { statements?: Array<{ sql: string }> } | undefined)?.statements ?? [];
      const results = Array.isArray(trip.response) ? (trip.response as unknown[]) : [];
      const upsert = statements.findIndex((st) => st.sql.trimStart().startsWith('INSERT'));
      if (upsert >= 0 && rows(results[upsert])?.length === 0) {
        return {
          trip: n,
          statement: upsert + 1,
          by: 'write',
          text: `Round trip ${n}, statement ${upsert + 1}: the upsert (INSERT … ON CONFLICT DO UPDATE … WHERE). The winner's row was already there, and its WHERE was false for that live row, so nothing was written and RETURNING gave no row; statement ${upsert + 2} read the winner's row under the same write lock.`,
          condition: upsertCondition(statements[upsert]?.sql ?? ''),
        };
      }
      if (
        statements.length === 1 &&
        statements[0]?.sql.trimStart().startsWith('SELECT') &&
        rows(results[0])?.length === 1 &&
        i === trips.length - 1
      ) {
        return {
          trip: n,
          statement: 1,
          by: 'read',
          text: `Round trip ${n}: the read (SELECT) already found the winner's row, so this claim never wrote: the read is a shortcut, the upsert's WHERE is the mechanism.`,
          condition: null,
        };
      }
    } else if (storeName === 'postgres') {
      const text = (trip.request as { text?: string } | undefined)?.text ?? '';
      if (!text.trimStart().startsWith('WITH cur')) continue;
      const found = rows(trip.response);
      if (found?.length === 0) {
        return {
          trip: n,
          statement: null,
          by: 'write',
          text: `Round trip ${n}: the claim statement. Its snapshot showed no row, so it tried to insert; it waited for the winner's uncommitted row, then the upsert's DO UPDATE … WHERE was false for that row, so nothing was written and RETURNING gave no row. The store sent the statement again and read the winner's row.`,
          condition: upsertCondition(text),
        };
      }
      if ((found?.[0] as { claimed?: unknown } | undefined)?.claimed === false) {
        return {
          trip: n,
          statement: null,
          by: 'read',
          text: `Round trip ${n}: the claim statement's own read (cur) already showed the winner's row, so its INSERT had nothing to write: the read is a shortcut, the DO UPDATE … WHERE is the mechanism.`,
          condition: /WHERE NOT EXISTS \(SELECT 1 FROM cur[^\n]*/.exec(text)?.[0] ?? null,
        };
      }
    } else if (storeName === 'dynamodb') {
      const error = trip.error as { name?: string } | undefined;
      if (error?.name === 'ConditionalCheckFailedException') {
        const input =
          (trip.request as { command?: string; input?: { ConditionExpression?: string } } | undefined) ?? {};
        return {
          trip: n,
          statement: null,
          by: 'write',
          text: `Round trip ${n}: ${input.command ?? 'the write'}. Its ConditionExpression was false because the winner's item exists, so DynamoDB refused the write (ConditionalCheckFailedException) and returned that item.`,
          condition: input.input?.ConditionExpression ?? null,
        };
      }
    }
  }
  if (storeName === 'redis' && trips.length > 0) {
    return {
      trip: trips.length,
      statement: null,
      by: 'write',
      text: `Round trip ${trips.length}: the claim script checks and writes in one atomic step; it found the winner's live record, wrote nothing and replied with it.`,
      condition: null,
    };
  }
  if (storeName === 'memory') {
    return {
      trip: 1,
      statement: null,
      by: 'step',
      text: "The claim checks and sets in one synchronous step (no database, no condition to show): it found the winner's live record and set nothing.",
      condition: null,
    };
  }
  return null;
}

/** The engine operation behind each access pattern, by store name. */
const OPERATIONS: Record<string, { claim: string; complete: string; get: string }> = {
  dynamodb: {
    claim:
      'PutItem with ConditionExpression attribute_not_exists(pk) OR expired; a claimable row is taken over by an UpdateItem conditioned on its token',
    complete: 'UpdateItem (condition: token and in_progress)',
    get: 'GetItem (consistent read)',
  },
  sqlite: {
    claim:
      'BEGIN IMMEDIATE; INSERT … ON CONFLICT (pk) DO UPDATE … WHERE <claimable> RETURNING *: the conditional write. A SELECT of the row first is a shortcut that answers a refusal without the write lock.',
    complete: 'UPDATE … WHERE token = ? AND status = in_progress',
    get: 'SELECT * … WHERE pk = ?',
  },
  postgres: {
    claim:
      'INSERT … ON CONFLICT (pk) DO UPDATE … WHERE <claimable> RETURNING *: the conditional write, one statement. Its WITH cur read of the row is a shortcut that answers a refusal without locking.',
    complete: 'UPDATE … WHERE token = $1 AND status = in_progress',
    get: 'SELECT * … WHERE pk = $1',
  },
  redis: {
    claim: 'EVALSHA claim script: check and write in one atomic step (one hash key)',
    complete: 'EVALSHA complete script',
    get: 'HGETALL',
  },
  memory: { claim: 'Map get + set in one synchronous step', complete: 'Map set if the token holds', get: 'Map get' },
  default: { claim: 'claim', complete: 'complete', get: 'get' },
};

/** A record as the model page shows it (the response body as text; the token is the sandbox's own). */
function modelRecord(record: IdempotencyRecord) {
  return {
    pk: record.pk,
    key: record.key,
    status: record.status,
    fingerprint: record.fingerprint,
    id: record.id,
    token: record.token,
    claimedAt: record.claimedAt,
    leaseExpiresAt: record.leaseExpiresAt,
    expiresAt: record.expiresAt,
    retryable: record.status === 'failed' ? record.retryable : null,
    resultId: record.resultId,
    responseStatus: record.response?.status ?? null,
  };
}

interface RunResult<T> {
  readonly operation: string;
  readonly traced: boolean;
  readonly roundTrips: number;
  readonly trips: readonly RoundTrip[];
  readonly value?: T;
  readonly error?: unknown;
}

/** What the page gets for one operation: the store's return value (records shaped for display), the trips, the count. */
function present<T>(result: RunResult<T>) {
  const value = result.value as unknown;
  let shown: unknown = value;
  if (isRecord(value)) shown = modelRecord(value);
  else if (value && typeof value === 'object' && 'kind' in value && 'record' in value && isRecord(value.record)) {
    shown = { kind: value.kind, record: modelRecord(value.record) };
  }
  return {
    operation: result.operation,
    traced: result.traced,
    roundTrips: result.roundTrips,
    result: shown ?? null,
    ...(result.error === undefined ? {} : { error: result.error }),
    trips: result.trips,
  };
}

function isRecord(value: unknown): value is IdempotencyRecord {
  return typeof value === 'object' && value !== null && 'pk' in value && 'token' in value && 'fingerprint' in value;
}

/**
 * Every attribute of the item, as the page shows them, with the type this store gives each: DynamoDB's type
 * descriptor from the item it returned, SQLite's declared column type, the declared types of the other network
 * stores, otherwise the JavaScript type of the value the store holds (memory).
 */
function attributeTypes(store: object, trips: readonly RoundTrip[], record: IdempotencyRecord | null) {
  const ms = (name: string) => (name.endsWith('At') ? 'epoch ms' : '');
  for (const trip of trips) {
    const item = (trip.response as { Item?: Record<string, Record<string, unknown>> } | undefined)?.Item;
    if (item && typeof item === 'object') {
      return {
        source: 'the type descriptors of the item GetItem returned',
        fields: FIELDS.map((f) => {
          const descriptor = item[f.name];
          const type = descriptor ? (Object.keys(descriptor)[0] ?? '?') : 'absent while empty';
          const unit =
            f.name === 'expiresAt' ? 'epoch seconds, for native TTL (expiresAtMs holds the exact ms)' : ms(f.name);
          return { ...f, storedAs: f.name, type, unit };
        }),
      };
    }
  }
  const sqlite = store as {
    database?: { prepare?: (sql: string) => { all: (...p: unknown[]) => unknown[] } };
    table?: unknown;
  };
  if (typeof sqlite.database?.prepare === 'function' && typeof sqlite.table === 'string') {
    const table = sqlite.table;
    const columns = sqlite.database.prepare('SELECT name, type FROM pragma_table_info(?)').all(table) as Array<{
      name: string;
      type: string;
    }>;
    const declared = new Map(columns.map((c) => [c.name, c.type]));
    return {
      source: `the declared column types of ${table} (PRAGMA table_info)`,
      fields: FIELDS.map((f) => ({
        ...f,
        storedAs: `${table}.${f.column}`,
        type: declared.get(f.column) ?? '?',
        unit: ms(f.name),
      })),
    };
  }
  const known = DECLARED[(store as { name?: string }).name ?? ''];
  if (known) {
    return {
      source: "the store's schema",
      fields: FIELDS.map((f) => ({ ...f, storedAs: known.name(f), type: known.type(f), unit: known.unit(f) })),
    };
  }
  const flat: Record<string, unknown> | undefined = record
    ? {
        ...record,
        responseStatus: record.response?.status,
        responseHeaders: record.response?.headers,
        responseBody: record.response?.body,
      }
    : undefined;
  return {
    source: 'the values the store holds (JavaScript types)',
    fields: FIELDS.map((f) => {
      const value = flat?.[f.name];
      const type =
        value === undefined
          ? '?'
          : value === null
            ? 'null'
            : value instanceof Uint8Array
              ? 'Uint8Array'
              : Array.isArray(value)
                ? 'array'
                : typeof value;
      return { ...f, storedAs: f.name, type, unit: ms(f.name) };
    }),
  };
}

interface Field {
  readonly name: string;
  readonly column: string;
  /** Its Postgres column type (schema.sql). */
  readonly pg: string;
  readonly meaning: string;
}

/** Every attribute of an `IdempotencyKey` item, in the order the page lists them. */
const FIELDS: readonly Field[] = [
  { name: 'pk', column: 'pk', pg: 'text', meaning: "the item's address: IDEMPOTENCY#<scope>#<key>" },
  {
    name: 'scope',
    column: 'scope',
    pg: 'text',
    meaning: 'whose key it is (the account), so two accounts never share a row',
  },
  { name: 'key', column: 'key', pg: 'text', meaning: 'the Idempotency-Key the client sent' },
  { name: 'status', column: 'status', pg: 'text', meaning: 'in_progress → succeeded or failed' },
  {
    name: 'fingerprint',
    column: 'fingerprint',
    pg: 'text',
    meaning: 'a hash of the request (method, path, body): a retry must match it',
  },
  { name: 'id', column: 'id', pg: 'text', meaning: "the record's id, kept by retries, new once the row has expired" },
  {
    name: 'token',
    column: 'token',
    pg: 'text',
    meaning: "the current claim's secret: only its holder may complete or renew",
  },
  { name: 'claimedAt', column: 'claimed_at', pg: 'bigint', meaning: 'when the current claim was made' },
  {
    name: 'leaseExpiresAt',
    column: 'lease_expires_at',
    pg: 'bigint',
    meaning: 'until when the claim holds; after it a retry may take over',
  },
  { name: 'expiresAt', column: 'expires_at', pg: 'bigint', meaning: 'when the row stops counting (the TTL)' },
  { name: 'retryable', column: 'retryable', pg: 'boolean', meaning: 'for failed: may a retry run the work again' },
  { name: 'resultId', column: 'result_id', pg: 'text', meaning: 'what the work produced (the charge id)' },
  { name: 'responseStatus', column: 'response_status', pg: 'integer', meaning: "the stored answer's status" },
  { name: 'responseHeaders', column: 'response_headers', pg: 'jsonb', meaning: "the stored answer's headers" },
  {
    name: 'responseBody',
    column: 'response_body',
    pg: 'bytea',
    meaning: "the stored answer's body, replayed byte for byte",
  },
];

/** What the network stores declare (their schema.sql and scripts), for stores whose replies do not carry types. */
const DECLARED: Record<string, { name(f: Field): string; type(f: Field): string; unit(f: Field): string }> = {
  postgres: {
    name: (f) => f.column,
    type: (f) => f.pg,
    unit: (f) => (f.name.endsWith('At') ? 'epoch ms' : ''),
  },
  redis: {
    name: (f) => (f.name === 'pk' ? 'the Redis key (prefix + pk)' : `hash field ${f.name}`),
    type: () => 'string',
    unit: (f) => (f.name.endsWith('At') ? 'epoch ms as decimal digits; the key also has a PEXPIRE' : ''),
  },
};

function readKey(raw: unknown): string | Response {
  if (typeof raw !== 'string') return badRequest('`key` is required: an Idempotency-Key value.', 'key');
  try {
    return parseKey(raw);
  } catch (error) {
    if (isIdempotencyError(error)) return badRequest(error.message, 'key');
    throw error;
  }
}

async function readJson(request: Request): Promise<Record<string, unknown> | Response> {
  const text = await request.text();
  if (text.length > 10_000) return badRequest('The body is too large.', 'body');
  if (text === '') return {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      return parsed as Record<string, unknown>;
  } catch {
    // answered below
  }
  return problem({
    status: 400,
    slug: 'body-invalid',
    title: 'Malformed JSON',
    detail: 'The body must be a JSON object.',
  });
}

function describeError(error: unknown): unknown {
  if (error instanceof Error) {
    const own = Object.fromEntries(Object.entries(error).filter(([k]) => k !== 'stack'));
    return { name: error.name, message: error.message, ...own };
  }
  return error;
}

/**
 * A `JSON.stringify` replacer for raw engine values: bytes as their length and text, bigints as strings, errors by
 * name, message and own fields (e.g. DynamoDB's `ConditionalCheckFailedException` and its `$metadata`).
 */
function jsonSafe(this: unknown, _key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (isBufferJson(value))
    return { bytes: value.data.length, text: new TextDecoder().decode(Uint8Array.from(value.data.slice(0, 2_000))) };
  if (value instanceof Uint8Array) {
    const text = new TextDecoder('utf-8', { fatal: false }).decode(value.subarray(0, 2_000));
    return { bytes: value.byteLength, text };
  }
  if (value instanceof Error) return describeError(value);
  if (value instanceof Map) return Object.fromEntries(value);
  if (value instanceof Set) return [...value];
  if (typeof value === 'function' || typeof value === 'symbol') return undefined;
  return value;
}

/** A Node `Buffer` after its own `toJSON` ran (which happens before any replacer sees it). */
function isBufferJson(value: unknown): value is { type: 'Buffer'; data: number[] } {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { type?: unknown }).type === 'Buffer' &&
    Array.isArray((value as { data?: unknown }).data)
  );
}

function notAllowed(allow: string): Response {
  return problem({ status: 405, slug: 'method-not-allowed', title: 'Method not allowed', headers: { allow } });
}
