/**
 * The soak's load: a bounded number of requests against one demo server, mixing new keys, replays, in-flight
 * conflicts, mismatched payloads, keyless charges and invalid keys, each answer checked as it arrives, with
 * the server's resident memory (RSS) sampled as the run goes. The client keeps a bounded window of recent keys,
 * so its own memory does not grow with the run either.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';

export type Kind = 'new' | 'replay' | 'conflict' | 'mismatch' | 'keyless' | 'invalid-key';

/** Weights of each kind of step (a conflict step is two concurrent requests). */
export const MIX: Readonly<Record<Kind, number>> = {
  new: 40,
  replay: 30,
  conflict: 10,
  mismatch: 10,
  keyless: 5,
  'invalid-key': 5,
};

export interface Sample {
  readonly requests: number;
  readonly seconds: number;
  readonly rssMiB: number;
}

export interface SoakResult {
  readonly requests: number;
  readonly seconds: number;
  readonly counts: Readonly<Record<Kind, number>>;
  /** Charges the run must have made: one per new key, per conflict pair, per keyless request. */
  readonly expectedCharges: number;
  /** Records the run must have stored: one per new key and per conflict pair. */
  readonly expectedRecords: number;
  readonly samples: readonly Sample[];
  /** Wrong answers, with what was expected; empty on a good run. */
  readonly errors: readonly string[];
}

export interface SoakOptions {
  readonly url: string;
  readonly pid: number;
  readonly requests: number;
  readonly concurrency?: number;
  /** RSS samples over the run. */
  readonly samples?: number;
  readonly apiKey?: string;
}

/**
 * The server's resident set size in MiB (Linux `/proc`, else `ps`).
 *
 * @example
 * rssMiB(server.child.pid)
 */
export function rssMiB(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1]);
    if (Number.isFinite(kb)) return kb / 1024;
  } catch {
    // not Linux: ask ps
  }
  return Number(execFileSync('ps', ['-o', 'rss=', '-p', String(pid)], { encoding: 'utf8' }).trim()) / 1024;
}

/**
 * Runs the load; resolves once `requests` requests have been answered.
 *
 * @example
 * const result = await soak({ url: server.url, pid: server.child.pid, requests: 20_000 })
 */
export async function soak({
  url,
  pid,
  requests,
  concurrency = 16,
  samples = 40,
  apiKey = 'sk_test_alice',
}: SoakOptions): Promise<SoakResult> {
  const auth = `Bearer ${apiKey}`;
  const counts: Record<Kind, number> = { new: 0, replay: 0, conflict: 0, mismatch: 0, keyless: 0, 'invalid-key': 0 };
  const errors: string[] = [];
  const recent: Array<{ key: string; amount: number; status: number; body: string }> = [];
  const WINDOW = 500;
  const kinds = Object.entries(MIX).flatMap(([kind, weight]) => Array<Kind>(weight).fill(kind as Kind));
  const started = performance.now();
  const sampleEvery = Math.max(1, Math.floor(requests / samples));
  const taken: Sample[] = [];
  let sent = 0;
  let done = 0;
  let nextSample = 0;

  const post = async (body: unknown, headers: Record<string, string>) => {
    const response = await fetch(`${url}/v1/charges`, {
      method: 'POST',
      headers: { authorization: auth, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed'),
      body: await response.text(),
    };
  };
  const fail = (what: string) => {
    if (errors.length < 50) errors.push(what);
  };
  const amountOf = () => 100 + Math.floor(Math.random() * 99_000);
  const answered = (n: number) => {
    done += n;
    while (done >= nextSample) {
      taken.push({ requests: done, seconds: (performance.now() - started) / 1000, rssMiB: rssMiB(pid) });
      nextSample += sampleEvery;
    }
  };

  async function step(drawn: Kind): Promise<void> {
    const kind = (drawn === 'replay' || drawn === 'mismatch') && recent.length === 0 ? 'new' : drawn;
    counts[kind]++;
    const pick = recent[Math.floor(Math.random() * recent.length)] as (typeof recent)[number];
    switch (kind) {
      case 'new': {
        const key = randomUUID();
        const amount = amountOf();
        const declined = Math.random() < 0.1;
        const answer = await post(
          { amount, source: declined ? 'tok_chargeDeclined' : 'tok_visa' },
          { 'idempotency-key': key },
        );
        if (answer.status !== (declined ? 402 : 201) || answer.replayed !== null)
          fail(`new ${key}: ${answer.status} ${answer.body.slice(0, 100)}`);
        recent.push({ key, amount, status: answer.status, body: answer.body });
        if (recent.length > WINDOW) recent.shift();
        return answered(1);
      }
      case 'replay': {
        const answer = await post(
          { amount: pick.amount, source: pick.status === 402 ? 'tok_chargeDeclined' : 'tok_visa' },
          { 'idempotency-key': pick.key },
        );
        if (answer.status !== pick.status || answer.replayed !== 'true' || answer.body !== pick.body)
          fail(`replay ${pick.key}: ${answer.status} ${answer.replayed}`);
        return answered(1);
      }
      case 'mismatch': {
        const answer = await post({ amount: pick.amount + 1 }, { 'idempotency-key': pick.key });
        if (answer.status !== 400 || !answer.body.includes('idempotency-key-reused'))
          fail(`mismatch ${pick.key}: ${answer.status}`);
        return answered(1);
      }
      case 'conflict': {
        // Two at once, the first holding the key for a moment: one runs, the other is refused (409) or replayed.
        const key = randomUUID();
        const amount = amountOf();
        const [a, b] = await Promise.all([
          post({ amount }, { 'idempotency-key': key, 'idem-lab-delay-ms': '20' }),
          post({ amount }, { 'idempotency-key': key }),
        ]);
        const executed = [a, b].filter((x) => x.status === 201 && x.replayed === null);
        const others = [a, b].filter((x) => !(x.status === 201 && x.replayed === null));
        if (
          executed.length !== 1 ||
          others.some((x) => x.status !== 409 && !(x.status === 201 && x.body === executed[0]?.body))
        ) {
          fail(`conflict ${key}: ${a.status}/${a.replayed} ${b.status}/${b.replayed}`);
        }
        return answered(2);
      }
      case 'keyless': {
        const answer = await post({ amount: amountOf() }, {});
        if (answer.status !== 201) fail(`keyless: ${answer.status}`);
        return answered(1);
      }
      case 'invalid-key': {
        const answer = await post({ amount: amountOf() }, { 'idempotency-key': 'x'.repeat(256) });
        if (answer.status !== 400 || !answer.body.includes('idempotency-key-invalid'))
          fail(`invalid key: ${answer.status}`);
        return answered(1);
      }
    }
  }

  answered(0);
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (sent < requests) {
        const kind = kinds[Math.floor(Math.random() * kinds.length)] as Kind;
        sent += kind === 'conflict' ? 2 : 1;
        try {
          await step(kind);
        } catch (error) {
          fail(`${kind}: ${(error as Error).message}`);
          answered(1);
        }
      }
    }),
  );
  return {
    requests: done,
    seconds: (performance.now() - started) / 1000,
    counts,
    expectedCharges: counts.new + counts.conflict + counts.keyless,
    expectedRecords: counts.new + counts.conflict,
    samples: taken,
    errors,
  };
}

/**
 * Does RSS level off? The last third of the samples may not rise above the middle third's peak by more than
 * `factor` plus `slackMiB` (a generous bound: RSS is noisy, and a short run on a loaded machine is still
 * growing its heap to its working size; a leak is a trend that outgrows it).
 *
 * @example
 * levelsOff(result.samples) // → { middleMax, lastMax, ok }
 */
export function levelsOff(
  samples: readonly Sample[],
  factor = 1.25,
  slackMiB = 32,
): { middleMax: number; lastMax: number; limit: number; ok: boolean } {
  const third = Math.floor(samples.length / 3);
  const max = (from: number, to: number) => Math.max(...samples.slice(from, to).map((s) => s.rssMiB));
  const middleMax = max(third, 2 * third);
  const lastMax = max(2 * third, samples.length);
  const limit = middleMax * factor + slackMiB;
  return { middleMax, lastMax, limit, ok: lastMax <= limit };
}

/** A one-line sparkline and a short table of the curve, for the docs. */
export function describeCurve(samples: readonly Sample[], rows = 11): string {
  const bars = '▁▂▃▄▅▆▇█';
  const values = samples.map((s) => s.rssMiB);
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  const spark = values
    .map((v) => bars[Math.min(bars.length - 1, Math.floor(((v - lo) / Math.max(1e-9, hi - lo)) * bars.length))])
    .join('');
  const picks = Array.from(
    { length: rows },
    (_, i) => samples[Math.round((i * (samples.length - 1)) / (rows - 1))] as Sample,
  );
  const table = picks.map((s) => `| ${s.requests} | ${s.seconds.toFixed(1)} | ${s.rssMiB.toFixed(1)} |`).join('\n');
  return `RSS ${lo.toFixed(1)}–${hi.toFixed(1)} MiB: ${spark}\n\n| requests | seconds | RSS (MiB) |\n|---:|---:|---:|\n${table}`;
}
