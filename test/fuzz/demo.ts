/**
 * The demo server a fuzz suite runs against (SQLite, the test API key configured), its database opened read-only,
 * and the suite's tally of what it saw, printed at the end with the seed that replays the run.
 */
import Database from 'better-sqlite3';
import { afterAll, beforeAll } from 'vitest';
import { startDemo, tempDir, type DemoProcess } from '../harness.js';
import { API_KEY } from './oracle.js';

export interface FuzzedDemo {
  /** The server's base URL (once `beforeAll` has run). */
  readonly url: string;
  readonly tally: Map<string, number>;
  readonly count: (what: string) => void;
  /** The rows a table of the server's database holds now. */
  readonly rows: (table: 'charges' | 'idem_records') => number;
}

/** Starts the demo before the suite's tests (lab mode `lab`) and stops it after, printing `name`'s tally. */
export function fuzzedDemo(name: string, seed: number, lab: '0' | '1'): FuzzedDemo {
  const dir = tempDir('idem-fuzz-');
  let server: DemoProcess | undefined;
  let db: Database.Database | undefined;
  const tally = new Map<string, number>();
  beforeAll(async () => {
    console.log(`${name} seed ${seed} (IDEM_FUZZ_SEED=${seed} replays it)`);
    // Outside lab mode the test keys must be configured (HEAD ignores the variable; the incoming config requires it).
    server = await startDemo({
      IDEM_STORE: `sqlite:${dir.path}/idem.db`,
      IDEM_LAB: lab,
      IDEM_API_KEYS: `${API_KEY}:acct_alice`,
    });
    db = new Database(`${dir.path}/idem.db`, { readonly: true, fileMustExist: true });
  });
  afterAll(async () => {
    db?.close();
    await server?.stop();
    dir.remove();
    console.log(`${name} tally:`, Object.fromEntries([...tally].sort()));
  });
  return {
    get url() {
      if (!server) throw new Error('the fuzzed demo is not started yet');
      return server.url;
    },
    tally,
    count: (what) => void tally.set(what, (tally.get(what) ?? 0) + 1),
    rows: (table) => ((db as Database.Database).prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n,
  };
}
