/**
 * `idem records resolve SCOPE KEY` (docs/DESIGN.md: Takeover policy) against a real SQLite file and a real
 * PostgreSQL schema: each form settles a record left in progress by a dead holder, and the quarantining engine
 * then replays what was recorded, or (after --rerun) runs the work under the same id; a live lease is refused.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../packages/idem/src/index.js';
import { payments, postgres, postgresql, quarantined, resolve, SCOPE, sqlite, type Backing } from './resolve-kit.js';

for (const [name, open, available] of [
  ['SQLite', sqlite, true],
  ['PostgreSQL', postgresql, postgres],
] as const) {
  describe.skipIf(!available)(`idem records resolve on ${name}`, () => {
    /** A case on a fresh backing of its own, with a fresh key; the backing is dropped after it. */
    const on = (test: (backing: Backing, key: string) => Promise<void>) => async () => {
      const backing = await open();
      try {
        await test(backing, randomUUID());
      } finally {
        await backing.close();
      }
    };
    it(
      '--succeeded --status 201 --body: recorded, and every retry replays it; the work never runs',
      on(async (backing, key) => {
        const id = await quarantined(backing.store, key);
        const body = JSON.stringify({ charged: id });
        const out = await resolve(backing, key, '--succeeded', '--status', '201', '--body', body);
        expect([out.code, out.stderr, out.stdout]).toEqual([
          0,
          '',
          `Resolved key "${key}" in scope ${SCOPE} (id ${id}): succeeded, 201; every retry now replays it.\n`,
        ]);
        const record = await backing.store.get(recordPk(SCOPE, key));
        expect([
          record?.status,
          record?.id,
          record?.response?.status,
          new TextDecoder().decode(record?.response?.body),
        ]).toEqual(['succeeded', id, 201, body]);
        const { pay, ran } = payments(backing.store);
        expect(await pay({ key })).toEqual({ charged: id });
        expect(ran).toEqual([]);
      }),
    );

    it(
      '--failed --status 402: a final failure every retry gets',
      on(async (backing, key) => {
        await quarantined(backing.store, key);
        const body = JSON.stringify({ name: 'Declined', message: 'card declined' });
        const out = await resolve(backing, key, '--failed', '--status', '422', '--body', body);
        expect([out.code, out.stderr]).toEqual([0, '']);
        const record = await backing.store.get(recordPk(SCOPE, key));
        expect([record?.status, record?.retryable, record?.response?.status]).toEqual(['failed', false, 422]);
        const { pay, ran } = payments(backing.store);
        await expect(pay({ key })).rejects.toMatchObject({
          name: 'IdempotentFailure',
          originalName: 'Declined',
          message: 'card declined',
        });
        expect(ran).toEqual([]);
      }),
    );

    it(
      '--rerun: the next attempt runs the work once, under the same id (a retryable failure is no takeover)',
      on(async (backing, key) => {
        const id = await quarantined(backing.store, key);
        const out = await resolve(backing, key, '--rerun');
        expect([out.code, out.stderr, out.stdout]).toEqual([
          0,
          '',
          `Resolved key "${key}" in scope ${SCOPE} (id ${id}): the next attempt runs the work again, under this id.\n`,
        ]);
        const { pay, ran } = payments(backing.store);
        expect(await pay({ key })).toEqual({ charged: id });
        expect(await pay({ key })).toEqual({ charged: id });
        expect(ran).toEqual([id]);
      }),
    );

    it(
      'a live lease is refused with one line, and the record is left as it was',
      on(async (backing, key) => {
        await quarantined(backing.store, key, 120_000);
        const before = await backing.store.get(recordPk(SCOPE, key));
        const out = await resolve(backing, key, '--rerun');
        expect(out.code).toBe(1);
        expect(out.stdout).toBe('');
        expect(out.stderr).toMatch(
          new RegExp(
            `^idem records: the lease on key "${key}" in scope ${SCOPE} is live for 11[89] s more, past --wait 30 s; claimed 2 s ago: its holder may still be running\\. Resolve it once the lease has lapsed, or give a longer --wait\\.\\n$`,
          ),
        );
        expect(await backing.store.get(recordPk(SCOPE, key))).toEqual(before);
      }),
    );
  });
}
