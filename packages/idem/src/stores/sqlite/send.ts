/**
 * How the store calls into the engine: every call (a trip) counted and reported to `onRoundTrip` with the
 * statements it ran and what each returned, and statements prepared once. Internal: the store holds one.
 */
import type { RoundTrip } from '../contract.js';
import type { RoundTripMeter } from '../shared/round-trips.js';
import type { Row } from './codec.js';
import type { SqliteDatabase, SqliteRoundTripRequest, SqliteStatement } from './sqlite-options.js';

export interface SqliteCalls {
  readonly roundTrips: number;
  readonly closed: boolean;
  trip<R>(op: RoundTrip['op'], call: () => R): R;
  execute<R>(sql: string, params: Record<string, unknown> | undefined, call: () => R, result: (value: R) => unknown): R;
  one(sql: string, params: Record<string, unknown>): Row | undefined;
  all(sql: string, params: Record<string, unknown>): Row[];
  run(sql: string, params: Record<string, unknown>): number;
  pragma(source: string): unknown;
  close(): void;
}

export function sqliteCalls(database: SqliteDatabase, meter: RoundTripMeter): SqliteCalls {
  /** The trip in progress, recorded only while someone observes (every trip is synchronous, so one suffices). */
  let observed: { statements: SqliteRoundTripRequest['statements'][number][]; results: unknown[] } | undefined;

  /** One call into the engine: counted, and reported to `onRoundTrip` once it has returned or thrown. */
  const trip = <R>(op: RoundTrip['op'], call: () => R): R => {
    meter.trip();
    if (!meter.onRoundTrip) return call();
    const current = (observed = { statements: [], results: [] });
    const request: SqliteRoundTripRequest = { statements: current.statements };
    try {
      const value = call();
      meter.report({ op, request, response: current.results });
      return value;
    } catch (error) {
      meter.report({ op, request, error });
      throw error;
    } finally {
      observed = undefined;
    }
  };

  // Statements are prepared on first use (the table may not exist until `migrate()`), then reused.
  const prepared = new Map<string, SqliteStatement>();
  const statement = (sql: string): SqliteStatement => {
    let found = prepared.get(sql);
    if (!found) {
      found = database.prepare(sql);
      prepared.set(sql, found);
    }
    return found;
  };
  /** Runs one statement of the current trip, noting it (before, so a failing one shows) and what it returned. */
  const execute = <R>(
    sql: string,
    params: Record<string, unknown> | undefined,
    call: () => R,
    result: (value: R) => unknown,
  ): R => {
    if (!observed) return call();
    const { statements, results } = observed;
    statements.push(params === undefined ? { sql } : { sql, params });
    const value = call();
    results.push(result(value));
    return value;
  };
  /** The statement's first row (a single-row upsert's `RETURNING`, a lookup by pk); reported as a row list. */
  const one = (sql: string, params: Record<string, unknown>): Row | undefined =>
    execute(
      sql,
      params,
      () => statement(sql).get(params) as Row | undefined,
      (row) => (row === undefined ? [] : [row]),
    );
  const all = (sql: string, params: Record<string, unknown>): Row[] =>
    execute(
      sql,
      params,
      () => statement(sql).all(params) as Row[],
      (rows) => rows,
    );
  const run = (sql: string, params: Record<string, unknown>): number =>
    execute(
      sql,
      params,
      () => statement(sql).run(params).changes,
      (changes) => ({ changes }),
    );

  const pragma = (source: string): unknown =>
    execute(
      `PRAGMA ${source}`,
      undefined,
      () => database.pragma(source),
      (rows) => rows,
    );

  return {
    get roundTrips() {
      return meter.count;
    },
    get closed() {
      return meter.closed;
    },
    trip,
    execute,
    one,
    all,
    run,
    pragma,
    close(): void {
      meter.close();
    },
  };
}
