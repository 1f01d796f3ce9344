/**
 * A helper process for the local-work race in `index.test.ts`, not a test and not part of the library.
 *
 * Usage: `node --import tsx src/stores/sqlite/local-child.ts <dbfile> <key>`
 * Opens the (already migrated) database, which has a `ledger` table, and prints `ready`. Then it reads lines
 * from stdin with blocking reads (so it can wait inside a synchronous transaction):
 * - `go`: run local work on `<key>` through `runLocal`. After the plain read found the key free it prints `read`
 *   (the store's `claimBarrier`); inside the transaction, the work inserts one ledger row, prints `holding` and
 *   blocks until the line `release`, then answers 201.
 * At the end it prints one JSON line: `{ "replayed": bool, "status": n, "body": "…", "trips": [[rows, …], …] }`,
 * `trips` holding what each statement of each of the store's `local` round trips returned (row counts; `changes`).
 */
import { readSync, writeSync } from 'node:fs';
import Database from 'better-sqlite3';
import { createEngine } from '../../core/engine.js';
import { runLocal } from '../../core/local.js';
import { sqliteStore } from './index.js';

const [file, key] = process.argv.slice(2);
if (file === undefined || key === undefined) {
  console.error('usage: local-child.ts <dbfile> <key>');
  process.exit(2);
}

const say = (line: string): void => void writeSync(1, `${line}\n`);
/** One line of stdin, read with blocking reads: the thread stops here, even inside a transaction. */
const hear = (): string => {
  let line = '';
  const byte = Buffer.alloc(1);
  for (;;) {
    if (readSync(0, byte, 0, 1, null) === 0) throw new Error('local-child: stdin closed');
    const char = byte.toString('latin1');
    if (char === '\n') return line;
    line += char;
  }
};

const trips: unknown[][] = [];
const database = new Database(file);
const store = sqliteStore({
  database,
  closeDatabase: true,
  busyTimeoutMs: 20_000,
  claimBarrier: async () => say('read'),
  onRoundTrip: (trip) => {
    if (trip.op !== 'local') return;
    const results = (trip.response ?? []) as unknown[];
    trips.push(results.map((result) => (Array.isArray(result) ? result.length : result)));
  },
});
const engine = createEngine({ store, ttlMs: 86_400_000 });
say('ready');
if (hear() !== 'go') throw new Error('local-child: expected go');
const result = await runLocal(engine, { scope: 'acct_race', key, fingerprint: 'f'.repeat(64) }, (tx, { id }) => {
  tx.prepare('INSERT INTO ledger (ref, pid) VALUES (?, ?)').run(id, process.pid);
  say('holding');
  if (hear() !== 'release') throw new Error('local-child: expected release');
  const body = new TextEncoder().encode(JSON.stringify({ id, pid: process.pid }));
  return { response: { status: 201, headers: [['content-type', 'application/json']], body } };
});
await store.close();
const { replayed, response } = result;
say(JSON.stringify({ replayed, status: response.status, body: new TextDecoder().decode(response.body), trips }));
