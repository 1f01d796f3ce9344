/**
 * The Durable Objects store across a kill -9 of workerd, on the same local disk: a finished record replays byte
 * for byte, and an object started again keeps the alarm it had set (it reads it back as it starts), so a later,
 * longer-lived claim does not push an earlier record's deletion back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../testing/fixtures.js';
import { postKeyed, startWorkerd, workerdBinary, type Workerd } from './workerd.test-kit.js';

const binary = workerdBinary();

describe.skipIf('error' in binary)('durable-objects store on workerd, killed and started again', () => {
  it('replays a finished record byte for byte, and the alarm set before the kill still deletes first', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-durable-objects-restart-'));
    const path = (binary as { path: string }).path;
    let workerd: Workerd | undefined;
    try {
      workerd = await startWorkerd(path, { dir });
      const base = () => workerd?.base ?? '';
      const get = async (route: string) =>
        (await (await fetch(`${base()}${route}`, { signal: AbortSignal.timeout(20_000) })).json()) as unknown;
      const key = crypto.randomUUID();
      const charge = () => postKeyed(`${base()}/v1/charges`, key, 5_000);
      const first = await charge();
      const [early] = (await get('/test/expiring?ttlMs=4000')) as Array<{ pk: string; status: string }>;
      await workerd.stop(); // SIGKILL
      workerd = await startWorkerd(path, { dir });

      const replay = await charge();
      expect([first.status, first.replayed, replay.status, replay.replayed]).toEqual([201, null, 201, 'true']);
      expect(replay.bytes.equals(first.bytes)).toBe(true);
      // A claim in the same object that lives ten minutes: the object must not move its alarm to it.
      const [late] = (await get('/test/expiring?ttlMs=600000')) as Array<{ pk: string; status: string }>;
      expect([early?.status, late?.status]).toEqual(['in_progress', 'in_progress']);
      const status = async (pk = '') =>
        ((await get(`/test/get?pk=${encodeURIComponent(pk)}`)) as { status: string | null }).status;
      await waitFor('the alarm set before the kill to delete the early record', async () =>
        (await status(early?.pk)) === null ? true : undefined,
      );
      expect(await status(late?.pk)).toBe('in_progress');
    } finally {
      await workerd?.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
