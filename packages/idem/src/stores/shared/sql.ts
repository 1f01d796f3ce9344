/** What the SQL stores share: batched sweeps and a transaction around a body, on a connection of their pool. */
import { configError } from '../../core/errors.js';
import type { RoundTrip } from '../contract.js';
import type { RoundTripMeter } from './round-trips.js';

/** The options of every SQL store over a pool: whether `close()` ends the pool, and whether statements go prepared. */
export function checkPoolOptions(pool: { readonly end?: unknown }, endPoolOnClose: unknown, prepared: unknown): void {
  if (typeof endPoolOnClose !== 'boolean') throw configError('endPoolOnClose', 'a boolean', endPoolOnClose);
  if (endPoolOnClose && typeof pool.end !== 'function')
    throw configError('pool', 'a pool with end() when endPoolOnClose is true');
  if (typeof prepared !== 'boolean') throw configError('preparedStatements', 'a boolean', prepared);
}

/**
 * Deletes in batches of at most `batchSize` until a batch comes back short or `limit` rows are gone; `batch(take)`
 * deletes up to `take` rows and says how many it did, `between` runs before each further batch.
 */
export async function sweepInBatches(
  batchSize: number,
  limit: number,
  batch: (take: number) => Promise<number> | number,
  between?: () => Promise<void>,
): Promise<number> {
  if (!Number.isSafeInteger(batchSize) || batchSize <= 0)
    throw configError('batchSize', 'a positive integer', batchSize);
  if (!(Number.isSafeInteger(limit) || limit === Infinity) || limit < 0) {
    throw configError('limit', 'a non-negative integer', limit);
  }
  let deleted = 0;
  for (;;) {
    const take = Math.min(batchSize, limit - deleted);
    if (take <= 0) return deleted;
    const count = await batch(take);
    deleted += count;
    if (count < take) return deleted;
    await between?.();
  }
}

/** How a SQL store runs a transaction: its first statement, and a connection of its pool taken, used and given back. */
export interface Transactions<Connection> {
  /** `BEGIN`, `START TRANSACTION`. */
  readonly begin: string;
  connect(): Promise<Connection>;
  /** Sends `BEGIN`, `COMMIT` or `ROLLBACK` on `connection`, as a round trip of `op`. */
  send(op: RoundTrip['op'], connection: Connection, command: string): Promise<unknown>;
  /**
   * Gives `connection` back: `broken` is the error of a `begin`, `COMMIT` or `ROLLBACK` that failed (the session's
   * state is then unknown, so it must not be reused).
   */
  done(connection: Connection, broken: Error | undefined): void;
}

/**
 * `begin`, `body` on one connection, then `COMMIT` when it returns true, `ROLLBACK` when it returns false or throws
 * (rethrown). An error from the body (the work's effects, the UPDATE) leaves a healthy connection once rolled back.
 */
export async function transaction<Connection>(
  meter: RoundTripMeter,
  via: Transactions<Connection>,
  op: RoundTrip['op'],
  body: (connection: Connection) => Promise<boolean>,
): Promise<boolean> {
  meter.open();
  const connection = await via.connect();
  let broken: Error | undefined;
  const send = async (command: string): Promise<void> => {
    try {
      await via.send(op, connection, command);
    } catch (error) {
      broken = error instanceof Error ? error : new Error(String(error));
      throw error;
    }
  };
  try {
    await send(via.begin);
    let commit: boolean;
    try {
      commit = await body(connection);
    } catch (error) {
      await send('ROLLBACK').catch(() => {}); // The body's error is the one to report.
      throw error;
    }
    await send(commit ? 'COMMIT' : 'ROLLBACK');
    return commit;
  } finally {
    via.done(connection, broken);
  }
}
