/** What the SQL stores share: batched sweeps and a transaction around a body, on a connection of their pool. */
import { configError } from '../../core/errors.js';

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

/**
 * `begin`, `body`, then `COMMIT` when it returns true, `ROLLBACK` when it returns false or throws (rethrown);
 * `control` sends each of the three. `done(broken)` gives the connection back: `broken` is the error of a
 * `begin`, `COMMIT` or `ROLLBACK` that failed (the session's state is then unknown, so it must not be reused). An
 * error from the body (the work's effects, the UPDATE) leaves a healthy connection once rolled back.
 */
export async function transaction(
  begin: string,
  control: (command: string) => Promise<unknown>,
  body: () => Promise<boolean>,
  done: (broken: Error | undefined) => void,
): Promise<boolean> {
  let broken: Error | undefined;
  const send = async (command: string): Promise<void> => {
    try {
      await control(command);
    } catch (error) {
      broken = error instanceof Error ? error : new Error(String(error));
      throw error;
    }
  };
  try {
    await send(begin);
    let commit: boolean;
    try {
      commit = await body();
    } catch (error) {
      await send('ROLLBACK').catch(() => {}); // The body's error is the one to report.
      throw error;
    }
    await send(commit ? 'COMMIT' : 'ROLLBACK');
    return commit;
  } finally {
    done(broken);
  }
}
