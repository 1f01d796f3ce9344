/**
 * @module The model page's race: two claims of one fresh key, held so that both read before either writes (SQLite,
 * PostgreSQL), and what refused the loser, read from its round trips.
 */
import type { ClaimRequest, ClaimResult, IdempotencyStore, RoundTrip } from 'idem';
import { postgresStore, type PostgresPool, type PostgresPoolClient } from 'idem/stores/postgres';
import { sqliteStore, type SqliteDatabase } from 'idem/stores/sqlite';
import { readClaim } from './model-reading.js';
import { present, runOn, type RunResult, type TripRecorder } from './model-trips.js';

/** How long a race's claims wait at the barrier for each other before going on alone (a claim that failed early). */
const BARRIER_TIMEOUT_MS = 5_000;

/**
 * Races two claims of one fresh key (`request()` makes each, with its own token). Where the store reads before it
 * writes (SQLite, PostgreSQL), both wait at a barrier once past the read, so both write and the loser meets the
 * write's own condition. Each claim is its own operation with its own trips; PostgreSQL's barrier polls
 * (`pg_stat_activity`, until the loser waits on the winner's row) are counted apart, as they are no part of a claim.
 *
 * @example
 * const answer = await race(store, trips, () => claimRequest(scope, key), Date.now)
 */
export async function race(
  store: IdempotencyStore<unknown>,
  trips: TripRecorder,
  request: () => ClaimRequest,
  now: () => number,
) {
  const racer = await racing(store, trips, barrier(2));
  const run = runOn(racer, trips);
  const requests = [request(), request()] as const;
  const results = await Promise.all(requests.map((r) => run('claim', () => racer.claim(r))));
  const claims = results.map((result, i) => {
    const polls = result.trips.filter(isBarrierPoll).length;
    const own: RunResult<ClaimResult> = {
      ...result,
      trips: result.trips.filter((trip) => !isBarrierPoll(trip)),
      roundTrips: result.roundTrips - polls,
    };
    const value = result.value;
    const verdict = value?.kind === 'claimed' ? 'won' : value?.kind === 'existing' ? 'lost' : 'error';
    return {
      label: i === 0 ? 'A' : 'B',
      verdict,
      ...present(own),
      barrierPolls: polls,
      ...(value ? { reading: readClaim(null, value, requests[i]?.fingerprint ?? '', now()) } : {}),
      ...(verdict === 'lost' ? { refusedBy: refusedBy(store.name, own.trips) } : {}),
    };
  });
  return {
    key: requests[0].key,
    pk: requests[0].pk,
    barrier: racer !== store,
    claims,
    winners: claims.filter((c) => c.verdict === 'won').length,
  };
}

/** PostgreSQL's `claimBarrier` poll: is another backend waiting on this transaction's row yet? */
function isBarrierPoll(trip: RoundTrip): boolean {
  const text = (trip.request as { text?: unknown } | undefined)?.text;
  return typeof text === 'string' && text.includes('FROM pg_stat_activity');
}

/**
 * The store to race on: for SQLite and PostgreSQL, a second store over the same database (or pool) and table that
 * waits at `claimBarrier` between its read and its write; any other store decides in one step and races as it is.
 * PostgreSQL's pool is warmed with two connections first, so neither claim waits for a new one.
 */
async function racing(
  store: IdempotencyStore<unknown>,
  trips: TripRecorder,
  claimBarrier: (request: ClaimRequest) => Promise<void>,
): Promise<IdempotencyStore<unknown>> {
  const sqlite = store as { name: string; database?: SqliteDatabase; table?: string };
  if (store.name === 'sqlite' && sqlite.database && typeof sqlite.table === 'string') {
    return sqliteStore({
      database: sqlite.database,
      table: sqlite.table,
      onRoundTrip: trips.onRoundTrip,
      claimBarrier,
    });
  }
  const postgres = store as { name: string; pool?: PostgresPool<PostgresPoolClient>; schema?: string; table?: string };
  if (
    store.name === 'postgres' &&
    postgres.pool &&
    typeof postgres.schema === 'string' &&
    typeof postgres.table === 'string'
  ) {
    const warm = await Promise.all([postgres.pool.connect(), postgres.pool.connect()]);
    for (const client of warm) client.release();
    return postgresStore({
      pool: postgres.pool,
      schema: postgres.schema,
      table: postgres.table,
      onRoundTrip: trips.onRoundTrip,
      claimBarrier,
    });
  }
  return store;
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
