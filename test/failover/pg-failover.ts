/**
 * `npm run failover:pg`: PostgreSQL failover, measured (issue 33, item 3). Three experiments, each with
 * `IDEM_FAILOVER_ROUNDS` rounds per mode (default 5), the modes alternating (test/failover/pg-round.ts tells a
 * round):
 *
 * 1. kill -9 of the primary while the replica keeps up: `async` and `remote_apply`;
 * 2. the same with the replication link stalled for the last 700 ms before the kill;
 * 3. `remote_apply` with the link stalled for the last 3 s (longer than the pools' timeouts), and the same with
 *    every statement that has waited 1 s for the standby cancelled (`pg_cancel_backend`), as a pooler's
 *    `query_timeout` or a driver's cancel request would: PostgreSQL then acknowledges the commit.
 *
 * Prints a table per experiment and the totals per mode (`IDEM_FAILOVER_EXPERIMENTS=2,3` runs only those). Ports 55442 and 55443 (`IDEM_FAILOVER_PORT` moves them).
 */
import { startPgLab, type Replication } from './pg-pair.js';
import { failoverRound, formatRounds, type Round } from './pg-round.js';

const ROUNDS = Number(process.env.IDEM_FAILOVER_ROUNDS ?? 5);
const PORT = Number(process.env.IDEM_FAILOVER_PORT ?? 55442);
const LOAD = { workers: 32, killAfter: 300, afterPromotion: 100 } as const;

interface Experiment {
  readonly title: string;
  readonly modes: ReadonlyArray<{ readonly replication: Replication; readonly cancelSyncWaitsAfterMs: number }>;
  readonly stallMs: number;
}

const EXPERIMENTS: readonly Experiment[] = [
  {
    title: 'kill -9 of the primary, the replica keeping up:',
    modes: [
      { replication: 'async', cancelSyncWaitsAfterMs: 0 },
      { replication: 'remote_apply', cancelSyncWaitsAfterMs: 0 },
    ],
    stallMs: 0,
  },
  {
    title: 'kill -9 of the primary, the replication link stalled for the last 700 ms:',
    modes: [
      { replication: 'async', cancelSyncWaitsAfterMs: 0 },
      { replication: 'remote_apply', cancelSyncWaitsAfterMs: 0 },
    ],
    stallMs: 700,
  },
  {
    title:
      'kill -9 of the primary, the link stalled for the last 3 s: waits for the standby cancelled after 1 s, or not',
    modes: [
      { replication: 'remote_apply', cancelSyncWaitsAfterMs: 1_000 },
      { replication: 'remote_apply', cancelSyncWaitsAfterMs: 0 },
    ],
    stallMs: 3_000,
  },
];

/** `IDEM_FAILOVER_EXPERIMENTS=1,3` runs only those. */
const chosen = (process.env.IDEM_FAILOVER_EXPERIMENTS ?? '1,2,3').split(',').map(Number);

const lab = await startPgLab();
// Ctrl-C: the servers go with the script (an exiting process kills them, a signal would not reach that hook).
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => void lab.close().finally(() => process.exit(130)));
}
try {
  let n = 0;
  for (const { title, modes, stallMs } of EXPERIMENTS.filter((_, i) => chosen.includes(i + 1))) {
    const rounds: Round[] = [];
    for (let i = 0; i < ROUNDS * modes.length; i++) {
      const mode = modes[i % modes.length] as Experiment['modes'][number];
      rounds.push(
        await failoverRound({
          lab,
          name: `r${n++}`,
          primaryPort: PORT,
          replicaPort: PORT + 1,
          stallMs,
          ...mode,
          ...LOAD,
        }),
      );
      console.log(formatRounds(title, rounds).split('\n')[rounds.length + 1]);
    }
    console.log(`\n${formatRounds(title, rounds)}\n`);
  }
} finally {
  await lab.close();
}
