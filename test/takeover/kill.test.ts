/**
 * A worker process killed with SIGKILL in the middle of a payment, against a processor that does NOT deduplicate
 * (./processor.ts), then the same payment retried from this process once the dead worker's lease has lapsed.
 * Half the runs kill the worker after the processor's effect was made, half before it. Counted per policy: the
 * processor's effects per record id, and the runs with a double effect. 'rerun' shows the double effect that
 * 'reconcile' and 'quarantine' prevent (docs/DESIGN.md: Takeover policy).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { recordPk, type TakeoverPolicy } from '../../packages/idem/src/index.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { startChild } from '../fixtures/child.js';
import { tempDir } from '../harness.js';
import { POSTGRES_URL, serviceAvailable } from '../services.js';
import { open, payment, SCOPE, type Backing, type Opened } from './processor.js';
import pg from 'pg';

const postgres = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const RUNS = Number(process.env.IDEM_TAKEOVER_RUNS ?? 20);
const POLICIES: readonly TakeoverPolicy[] = ['rerun', 'reconcile', 'quarantine'];
const dir = tempDir('idem-takeover-');
afterAll(() => dir.remove());

interface Run {
  readonly policy: TakeoverPolicy;
  readonly killed: 'before' | 'after';
  readonly effects: number;
  /** What the retry got: the result's id matches the dead worker's (`same-id`), or the error code. */
  readonly retry: string;
}

/** One run: a worker killed mid-payment, its lease lapsed, the retry here. */
async function killAndRetry(
  backing: Backing,
  where: string,
  opened: Opened,
  policy: TakeoverPolicy,
  killed: 'before' | 'after',
): Promise<Run> {
  const key = randomUUID();
  const worker = startChild('../takeover/worker.ts', [backing, where, policy, key, killed]);
  // A worker that dies on its own (it should not) fails the run instead of leaving it waiting.
  const died = worker.done.then(({ code, stderr }) => Promise.reject(new Error(`worker exited ${code}: ${stderr}`)));
  const claimed = await Promise.race([worker.first, died]);
  const id = claimed.replace(/^claimed /, '');
  if (killed === 'after') await Promise.race([worker.hear(`effect ${id}`), died]);
  worker.proc.kill('SIGKILL');
  const { code } = await worker.done;
  died.catch(() => undefined);
  expect(code).toBe(null);
  const pk = recordPk(SCOPE, key);
  await waitFor('the dead worker’s lease lapsed', async () => {
    const record = await opened.store.get(pk);
    return record !== null && record.status === 'in_progress' && record.leaseExpiresAt < Date.now();
  });
  const pay = payment(opened, policy, async (retryId) => {
    await opened.effect(retryId);
    return { charged: retryId };
  });
  const retry = await pay({ key, amount: 500 }).then(
    (result) => (result.charged === id ? 'same-id' : `other id ${result.charged}`),
    (error: Error & { code?: string }) => error.code ?? error.message,
  );
  return { policy, killed, effects: await opened.effects(id), retry };
}

/** Per policy and kill point: how many runs ended with each number of effects, and what the retries got. */
function tally(runs: readonly Run[]) {
  const out: Record<string, Record<string, number>> = {};
  for (const run of runs) {
    const row = (out[`${run.policy} killed ${run.killed}`] ??= {});
    const cell = `${run.effects} effect${run.effects === 1 ? '' : 's'}, ${run.retry}`;
    row[cell] = (row[cell] ?? 0) + 1;
  }
  return out;
}

async function scenario(backing: Backing, where: string): Promise<void> {
  const opened = await open(backing, where, true);
  try {
    const runs: Run[] = [];
    for (let i = 0; i < RUNS; i++) {
      const killed = i % 2 === 0 ? 'after' : 'before';
      runs.push(...(await Promise.all(POLICIES.map((policy) => killAndRetry(backing, where, opened, policy, killed)))));
    }
    const doubles = Object.fromEntries(
      POLICIES.map((p) => [p, runs.filter((r) => r.policy === p && r.effects > 1).length]),
    );
    console.log(`${backing}: ${RUNS} runs per policy; runs with a double effect: ${JSON.stringify(doubles)}`);
    const half = RUNS / 2;
    expect(doubles).toEqual({ rerun: half, reconcile: 0, quarantine: 0 });
    expect(tally(runs)).toEqual({
      'rerun killed after': { '2 effects, same-id': half },
      'rerun killed before': { '1 effect, same-id': half },
      'reconcile killed after': { '1 effect, same-id': half },
      'reconcile killed before': { '1 effect, same-id': half },
      'quarantine killed after': { '1 effect, OUTCOME_UNKNOWN': half },
      'quarantine killed before': { '0 effects, OUTCOME_UNKNOWN': half },
    });
  } finally {
    await opened.close();
  }
}

describe('kill -9 mid-payment, a processor without deduplication, a retry from another process', () => {
  it(`SQLite: ${RUNS} runs per policy`, async () => {
    await scenario('sqlite', join(dir.path, `${randomUUID()}.db`));
  }, 600_000);

  it.skipIf(!postgres)(
    `PostgreSQL: ${RUNS} runs per policy`,
    async () => {
      const schema = `idem_takeover_${randomBytes(6).toString('hex')}`;
      try {
        await scenario('postgres', schema);
      } finally {
        const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await pool.end();
      }
    },
    600_000,
  );
});
