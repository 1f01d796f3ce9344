/**
 * A helper process for the multi-process race in `index.test.ts`, not a test and not part of the library.
 *
 * Usage: `node --import tsx src/stores/sqlite/race-child.ts <dbfile> <n> <key>...`
 * Opens the (already migrated) database, prints `ready`, and waits for a line on stdin carrying a wall-clock
 * instant (epoch ms); it spins until that instant, so both processes start together (to within the scheduler's
 * noise), then fires `n` rounds of claims over every key, each round in its own random order, back to back
 * (each claim is one `BEGIN IMMEDIATE` transaction that contends with the other process for the write lock),
 * and prints one JSON line:
 * `{ "pid": 123, "results": [{ "key": "...", "kind": "claimed" | "existing", "token": "...", "recordToken": "..." }] }`.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import Database from 'better-sqlite3';
import { recordPk } from '../../core/key.js';
import { sqliteStore } from './index.js';

const RACE_SCOPE = 'acct_race';

const [file, count, ...keys] = process.argv.slice(2);
const n = Number(count);
if (file === undefined || !Number.isSafeInteger(n) || n <= 0 || keys.length === 0) {
  console.error('usage: race-child.ts <dbfile> <n> <key>...');
  process.exit(2);
}

const store = sqliteStore({ database: new Database(file), closeDatabase: true });
const lines = createInterface({ input: process.stdin });
process.stdout.write('ready\n');
const [line] = (await once(lines, 'line')) as [string];
lines.close();
const startAt = Number(line);
if (!Number.isFinite(startAt)) throw new Error(`race-child: expected a start instant in epoch ms, got ${line}`);
while (Date.now() < startAt) {
  // Spin: a timer could wake this process later than the other one.
}

const attempts = [];
for (let i = 0; i < n; i++) {
  for (const key of shuffled(keys)) {
    const token = randomUUID();
    const claim = store.claim({
      pk: recordPk(RACE_SCOPE, key),
      scope: RACE_SCOPE,
      key,
      fingerprint: 'f'.repeat(64),
      token,
      id: randomUUID(),
      now: Date.now(),
      leaseMs: 60_000,
      ttlMs: 3_600_000,
    });
    attempts.push(claim.then((result) => ({ key, kind: result.kind, token, recordToken: result.record.token })));
  }
}
const results = await Promise.all(attempts);
await store.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, results })}\n`);

/** Each process walks the keys in its own random order, so the two meet on many keys at unpredictable moments. */
function shuffled<T>(items: readonly T[]): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
  }
  return copy;
}
