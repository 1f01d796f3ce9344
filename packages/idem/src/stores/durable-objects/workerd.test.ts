/**
 * The Durable Objects store on workerd, through `idem/http` and through the store: several requests racing one
 * key (the executions counted), the byte-identical replay, a reused key with another body, a lapsed lease taken
 * over with the stale holder fenced out, and an alarm deleting an expired record. The Worker is
 * worker.test-kit.ts; workerd installs on first use (workerd.test-kit.ts).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../testing/fixtures.js';
import { postKeyed, startWorkerd, workerdBinary, type Workerd } from './workerd.test-kit.js';

const binary = workerdBinary();
const RACERS = 12;

describe.skipIf('error' in binary)('durable-objects store on workerd', () => {
  let workerd: Workerd;
  beforeAll(async () => {
    if ('path' in binary) workerd = await startWorkerd(binary.path);
  });
  afterAll(() => workerd?.stop());

  const get = async (path: string) =>
    (await (await fetch(`${workerd.base}${path}`, { signal: AbortSignal.timeout(20_000) })).json()) as Record<
      string,
      unknown
    >;
  const charge = (key: string, amount: number, headers: Record<string, string> = {}) =>
    postKeyed(`${workerd.base}/v1/charges`, key, amount, headers);

  it('the entry point bundles for the neutral platform with no import left outside the bundle', async () => {
    const bundled = await build({
      entryPoints: [fileURLToPath(new URL('./index.ts', import.meta.url))],
      bundle: true,
      platform: 'neutral',
      format: 'esm',
      write: false,
      metafile: true,
      logLevel: 'error',
    });
    expect(Object.values(bundled.metafile.outputs).flatMap((o) => o.imports)).toEqual([]);
  });

  it(`${RACERS} requests race one key: exactly one runs, the rest get 409; then a byte-identical replay and a mismatch`, async () => {
    const key = crypto.randomUUID();
    const executions = async () => (await get(`/test/executions?key=${key}`)).executions as number;
    let settled = 0;
    const racing = Array.from({ length: RACERS }, () =>
      charge(key, 5_000, { 'test-hold': key }).then((result) => {
        settled += 1;
        return result;
      }),
    );
    // Every loser has its answer while the winner's work is held, unless a second one is running too.
    await waitFor('the losers to be answered, or a second execution', async () =>
      settled === RACERS - 1 || (await executions()) > 1 ? true : undefined,
    );
    expect(await get(`/test/release?hold=${key}`)).toEqual({ released: true });
    const results = await Promise.all(racing);
    expect(await get(`/test/executions?key=${key}`)).toEqual({ executions: 1, ledgerRows: 1 });
    expect(results.map((r) => r.status).sort()).toEqual([201, ...Array.from({ length: RACERS - 1 }, () => 409)]);
    const winner = results.find((r) => r.status === 201);

    const replay = await charge(key, 5_000);
    expect({ status: replay.status, replayed: replay.replayed }).toEqual({ status: 201, replayed: 'true' });
    expect(replay.bytes.equals(winner?.bytes ?? Buffer.alloc(0))).toBe(true);
    expect((JSON.parse(replay.bytes.toString()) as { execution: number }).execution).toBe(1);

    const mismatch = await charge(key, 6_000);
    expect({
      status: mismatch.status,
      type: (JSON.parse(mismatch.bytes.toString()) as { type: string }).type,
    }).toEqual({ status: 400, type: 'urn:idem:problem:idempotency-key-reused' });
    expect(await get(`/test/executions?key=${key}`)).toEqual({ executions: 1, ledgerRows: 1 });
  });

  it('a lapsed lease is taken over with the same id; the stale holder’s renew, complete and release are refused', async () => {
    expect(await get('/test/takeover')).toEqual({
      claimed: 'claimed',
      whileLive: ['existing', 't1'],
      taken: ['claimed', 't2', 'id1', 1_000],
      staleRenew: { ok: false },
      staleComplete: { ok: false },
      staleRelease: { ok: false },
      newComplete: { ok: true },
      stored: ['succeeded', 't2', 'ch_2', [2]],
    });
  });

  it('the alarm deletes each record once it expires, the later one by the alarm it set next, with no sweep', async () => {
    const started = Date.now();
    const records = (await get('/test/expiring?ttlMs=800,1600')) as unknown as Array<{ pk: string; status: string }>;
    expect(records.map((r) => r.status)).toEqual(['in_progress', 'in_progress']);
    const gone = async ({ pk }: { pk: string }) =>
      (await get(`/test/get?pk=${encodeURIComponent(pk)}`)).status === null;
    for (const [i, record] of records.entries()) {
      await waitFor(`the alarm to delete record ${i}`, () => gone(record), { everyMs: 100 });
      expect(Date.now() - started).toBeGreaterThanOrEqual(i === 0 ? 800 : 1_600);
    }
  });
});

describe.skipIf('error' in binary)('docs/DURABLE-OBJECTS.md on workerd', () => {
  it('its worker.ts, served as written: one execution, then a byte-identical replay', async () => {
    const docs = readFileSync(new URL('../../../../../docs/DURABLE-OBJECTS.md', import.meta.url), 'utf8');
    const source = /`worker\.ts`[^]*?```ts\n([^]*?)```/.exec(docs)?.[1];
    expect(source).toContain("export { IdempotencyDurableObject } from 'idem/durable-objects';");
    const workerd = await startWorkerd((binary as { path: string }).path, { source });
    try {
      const key = crypto.randomUUID();
      const first = await postKeyed(`${workerd.base}/`, key, 5_000);
      const replay = await postKeyed(`${workerd.base}/`, key, 5_000);
      expect([first.status, first.replayed, replay.status, replay.replayed]).toEqual([201, null, 201, 'true']);
      expect(replay.bytes.equals(first.bytes)).toBe(true);
      expect((JSON.parse(first.bytes.toString()) as { executions: number }).executions).toBe(1);
    } finally {
      await workerd.stop();
    }
  });
});
