/**
 * The worker process of ./kill.test.ts, killed with SIGKILL mid-payment.
 *
 * Usage: `node --import tsx test/takeover/worker.ts <sqlite|postgres> <file|schema> <policy> <key> <before|after>`.
 * Runs one payment of `key`. Inside the work it prints `claimed <id>`; with `after` it then makes the processor's
 * effect and prints `effect <id>`. Then it waits forever: the test kills it there, before the outcome is recorded.
 */
import type { TakeoverPolicy } from '../../packages/idem/src/index.js';
import { open, payment, type Backing } from './processor.js';

const [backing, where, policy, key, phase] = process.argv.slice(2) as [Backing, string, TakeoverPolicy, string, string];
// Kept alive until killed: the lease's timers do not hold the process, and a top-level await left pending with
// nothing else to run would end it (exit 13) before the kill this test is about.
setInterval(() => undefined, 1 << 30);
const opened = await open(backing, where);
const pay = payment(opened, policy, async (id) => {
  process.stdout.write(`claimed ${id}\n`);
  if (phase === 'after') {
    await opened.effect(id);
    process.stdout.write(`effect ${id}\n`);
  }
  return new Promise<never>(() => {});
});
await pay({ key, amount: 500 });
