/**
 * `idem records resolve` while a client keeps retrying a quarantined key (docs/DESIGN.md: Takeover policy). Every
 * retry that takes the lapsed lease over answers 409 `OUTCOME_UNKNOWN` and leaves a fresh lease, so the lease is
 * live almost all the time: resolve waits for it to lapse and claims it in the gap, on SQLite and PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../packages/idem/src/index.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';
import { payments, postgres, postgresql, quarantined, resolve, SCOPE, sqlite } from './resolve-kit.js';

/** The gap between two retries, as a client backing off a little (the reviewer's 50 ms). */
const RETRY_EVERY_MS = 50;

for (const [name, open, available] of [
  ['SQLite', sqlite, true],
  ['PostgreSQL', postgresql, postgres],
] as const) {
  describe.skipIf(!available)(`idem records resolve against a retrying client, on ${name}`, () => {
    it('waits for the lease a retry left, claims it in the gap; the retries then replay; the work never runs', async () => {
      const backing = await open();
      const key = randomUUID();
      try {
        const id = await quarantined(backing.store, key);
        const { pay, ran } = payments(backing.store);
        const answers: string[] = [];
        let stop = false;
        const client = (async () => {
          while (!stop) {
            answers.push(
              await pay({ key }).then(
                () => 'replayed',
                (error: { code?: string }) => String(error.code),
              ),
            );
            await new Promise((done) => setTimeout(done, RETRY_EVERY_MS));
          }
        })();
        // The client has re-armed the lease: a quarantine answer means a takeover, and a fresh live lease.
        await waitFor('a retry quarantined the key again', () => answers.includes('OUTCOME_UNKNOWN'));
        const out = await resolve(backing, key, '--succeeded', '--status', '201', '--body', '{"charged":true}');
        await waitFor('a retry got the resolution', () => answers.at(-1) === 'replayed');
        stop = true;
        await client;
        expect([out.code, out.stdout]).toEqual([
          0,
          `Resolved key "${key}" in scope ${SCOPE} (id ${id}): succeeded, 201; every retry now replays it.\n`,
        ]);
        expect(out.stderr).toMatch(/^idem records resolve: waiting for the lease on key "[^"]+" in scope \w+ to lapse/);
        const record = await backing.store.get(recordPk(SCOPE, key));
        expect([record?.status, record?.id, record?.response?.status]).toEqual(['succeeded', id, 201]);
        expect(ran).toEqual([]);
        // Between takeovers the retries met the live lease (in use), and at each lapse one took it over (unknown).
        expect(new Set(answers.filter((answer) => answer !== 'replayed'))).toEqual(
          new Set(['OUTCOME_UNKNOWN', 'IN_FLIGHT']),
        );
      } finally {
        await backing.close();
      }
    });

    it('--wait 0 refuses the live lease at once, naming what the one read saw', async () => {
      const backing = await open();
      const key = randomUUID();
      try {
        await quarantined(backing.store, key, 120_000);
        const out = await resolve(backing, key, '--rerun', '--wait', '0');
        expect([out.code, out.stdout]).toEqual([1, '']);
        expect(out.stderr).toMatch(
          /^idem records: the lease on key "[^"]+" in scope \w+ is live for 11[89] s more, past --wait 0 s; claimed 2 s ago: its holder may still be running\. Resolve it once the lease has lapsed, or give a longer --wait\.\n$/,
        );
      } finally {
        await backing.close();
      }
    });
  });
}
