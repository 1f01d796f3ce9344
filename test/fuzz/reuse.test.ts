/**
 * Keys reused across generated requests (issue item 4). `input.test.ts` gives every request a fresh key, so it
 * checks how bad input is refused, never what a key remembers. Here each run draws a small pool of keys and a
 * sequence of steps over them — the same key with the same charge (byte for byte, or the same JSON reformatted:
 * keys reordered, whitespace), with another charge, with an invalid body, and groups of requests sent at once —
 * against the real demo server over TCP (SQLite; lab mode, only so that the first of a group sent at once can ask
 * for slow work with `Idem-Lab-Delay-Ms` and the others meet it in flight). A model of what each key holds says
 * what each answer must be:
 *
 * - a key's first valid charge executes: 201 (or 402 for a declined card), a fresh answer, one ledger row;
 * - the same key and the same charge (same canonical JSON) afterwards: the first answer's exact status,
 *   content-type and body bytes, with `Idempotent-Replayed: true`, and no ledger row;
 * - the same key with another charge: 400 `idempotency-key-reused` (problem+json), and no ledger row;
 * - an invalid body is refused (400) before the key is looked at, and leaves the key as it was;
 * - duplicates sent at once on a fresh key: exactly one executes (one ledger row); each other one is a 409
 *   `idempotency-key-in-use`, a replay of the winner's bytes (same charge), or a 400 `idempotency-key-reused`
 *   (another charge, decided after the winner).
 *
 * Seeded: `IDEM_FUZZ_SEED=<n>` replays the generated sequences (which concurrent duplicate wins is up to the
 * server; the property accepts each legitimate outcome and nothing else). The seed is printed either way.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fuzzedDemo } from './demo.js';
import { API_KEY } from './oracle.js';

const SEED = Number(process.env.IDEM_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RUNS = 40;
const KEYS = 3;

/** A charge body, as an object (its canonical form is what the fingerprint compares). */
interface Charge {
  readonly amount: number | string;
  readonly currency?: string;
  readonly source?: string;
  readonly metadata?: { readonly order: string };
}
type Format = 'compact' | 'pretty' | 'reordered';
interface Send {
  readonly key: number;
  readonly charge: Charge;
  readonly format: Format;
  /** Send the key's first charge again instead (in this send's format), when the key has one. */
  readonly again?: boolean;
  /** Lab header: the work takes this long, so requests sent at once overlap it. */
  readonly delayMs?: number;
}
/** One step: one request, or several sent at once (on the same key). */
type Step = readonly Send[];

const charge: fc.Arbitrary<Charge> = fc.record(
  {
    amount: fc.oneof(
      { weight: 9, arbitrary: fc.constantFrom(500, 501, 777) },
      fc.constantFrom<number | string>(0, '500'),
    ),
    currency: fc.constantFrom('usd', 'eur'),
    source: fc.constantFrom('tok_visa', 'tok_visa', 'tok_mastercard', 'tok_chargeDeclined'),
    metadata: fc.constantFrom({ order: 'a' }, { order: 'b' }),
  },
  { requiredKeys: ['amount'] },
);
const format = fc.constantFrom<Format>('compact', 'pretty', 'reordered');
/** One step: one request, or two to four on one key sent at once (mostly the same charge, sometimes another). */
const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .record({ key: fc.integer({ min: 0, max: KEYS - 1 }), charge, format, again: fc.boolean() })
      .map((s): Step => [s]),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(
        fc.integer({ min: 0, max: KEYS - 1 }),
        charge,
        fc.constantFrom(0, 0, 60),
        fc.array(fc.tuple(fc.boolean(), charge, format), { minLength: 1, maxLength: 3 }),
      )
      .map(([key, first, delayMs, rest]): Step => [
        { key, charge: first, format: 'compact', delayMs },
        ...rest.map(([same, other, f]) => ({ key, charge: same ? first : other, format: f })),
      ]),
  },
);

/** Sorted keys, no whitespace: two bodies with the same canonical form have the same fingerprint. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

function bodyOf({ charge: c, format: f }: Send): string {
  if (f === 'pretty') return JSON.stringify(c, null, 2);
  if (f === 'reordered') return JSON.stringify(Object.fromEntries(Object.entries(c).reverse()));
  return JSON.stringify(c);
}

const valid = (c: Charge): boolean => typeof c.amount === 'number' && c.amount >= 1;

/** What a key holds in the model: nothing yet, or the first valid charge's canonical body and its answer. */
interface Held {
  readonly canonical: string;
  readonly answer: Answer;
}
interface Answer {
  readonly status: number;
  readonly contentType: string | null;
  readonly replayed: boolean;
  readonly problem: string | null;
  readonly body: string;
}

describe(`fuzzed key reuse over TCP (seed ${SEED})`, () => {
  const demo = fuzzedDemo('fuzz (key reuse)', SEED, '1');
  const { tally, count } = demo;
  let run = 0;
  const charges = () => demo.rows('charges');

  async function post(key: string, body: string, delayMs = 0): Promise<Answer> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${API_KEY}`,
      'content-type': 'application/json',
      'idempotency-key': key,
    };
    if (delayMs > 0) headers['idem-lab-delay-ms'] = String(delayMs);
    const response = await fetch(`${demo.url}/v1/charges`, {
      method: 'POST',
      headers,
      body,
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    const contentType = response.headers.get('content-type');
    const type = contentType === 'application/problem+json' ? (JSON.parse(text) as { type?: unknown }).type : undefined;
    const problem = typeof type === 'string' ? type.replace('urn:idem:problem:', '') : null;
    return {
      status: response.status,
      contentType,
      replayed: response.headers.get('idempotent-replayed') === 'true',
      problem,
      body: text,
    };
  }

  /** The answer's bytes that a replay must repeat. */
  const bytes = (a: Answer) => ({ status: a.status, contentType: a.contentType, body: a.body });

  it('the same key replays its first answer byte for byte, refuses another charge, and runs duplicates once', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
        const prefix = `r${SEED.toString(36)}.${(run++).toString(36)}.`;
        const keys = Array.from({ length: KEYS }, (_, i) => `${prefix}${i}`);
        const held = new Map<number, Held>();
        const firsts = new Map<number, Charge>();
        for (const drawn of steps) {
          const sends = drawn.map((s): Send => {
            const first = firsts.get(s.key);
            return s.again && first ? { ...s, charge: first } : s;
          });
          for (const s of sends) if (valid(s.charge) && !firsts.has(s.key)) firsts.set(s.key, s.charge);
          const key = (sends[0] as Send).key;
          const prior = held.get(key);
          const before = charges();
          const answers = await Promise.all(sends.map((s) => post(keys[key] as string, bodyOf(s), s.delayMs)));
          const fresh = answers.flatMap((a, i) => ((a.status === 201 || a.status === 402) && !a.replayed ? [i] : []));
          const anyValid = sends.some((s) => valid(s.charge));
          // Exactly one execution on a fresh key (if any request was valid); none on a key that already answered.
          expect(fresh.length).toBe(prior === undefined && anyValid ? 1 : 0);
          expect(charges() - before).toBe(fresh.length);
          const winner = fresh[0];
          const holder: Held | undefined =
            prior ??
            (winner === undefined
              ? undefined
              : { canonical: canonical((sends[winner] as Send).charge), answer: answers[winner] as Answer });
          for (const [i, s] of sends.entries()) {
            const a = answers[i] as Answer;
            const c = canonical(s.charge);
            if (!valid(s.charge)) {
              count('invalid body: 400');
              expect([a.status, a.problem === 'idempotency-key-reused', a.replayed]).toEqual([400, false, false]);
            } else if (i === winner) {
              count(`fresh ${a.status}`);
              expect(a.status).toBe(s.charge.source === 'tok_chargeDeclined' ? 402 : 201);
            } else if (holder?.canonical === c && a.status !== 409) {
              count(sends.length > 1 ? 'replay (sent at once)' : 'replay');
              expect([bytes(a), a.replayed]).toEqual([bytes(holder.answer), true]);
            } else if (a.status === 409) {
              // Only beside a duplicate that was still running: never on a key that had answered before the step.
              count('409 in use (sent at once)');
              expect([prior, sends.length > 1, a.problem]).toEqual([undefined, true, 'idempotency-key-in-use']);
            } else {
              count(sends.length > 1 ? 'mismatch 400 (sent at once)' : 'mismatch 400');
              expect([a.status, a.problem, holder !== undefined && holder.canonical !== c]).toEqual([
                400,
                'idempotency-key-reused',
                true,
              ]);
            }
          }
          if (holder && !prior) held.set(key, holder);
        }
      }),
      { seed: SEED, numRuns: RUNS, interruptAfterTimeLimit: 90_000 },
    );
    // The runs met the paths that matter (40 runs of up to 12 steps over 3 keys: each is drawn many times over).
    expect([tally.has('replay'), tally.has('mismatch 400'), tally.has('fresh 201'), tally.has('fresh 402')]).toEqual([
      true,
      true,
      true,
      true,
    ]);
  }, 150_000);

  it('duplicates of work in flight: 409 while it runs (another charge: 400 at once), its bytes replayed once it is done', async () => {
    const key = `r${SEED.toString(36)}.inflight`;
    const body = JSON.stringify({ amount: 4242, currency: 'usd' });
    const before = charges();
    const slow = post(key, body, 1_500);
    // Ordered by a signal, not a sleep: poll until the record is in progress.
    for (let seen = false; !seen;) {
      const response = await fetch(`${demo.url}/v1/idempotency_records`, {
        headers: { authorization: `Bearer ${API_KEY}` },
      });
      const { data } = (await response.json()) as { data: Array<{ key: string; status: string }> };
      seen = data.some((r) => r.key === key && r.status === 'in_progress');
    }
    const during = await Promise.all([
      post(key, body),
      post(key, JSON.stringify({ currency: 'usd', amount: 4242 })),
      post(key, JSON.stringify({ amount: 4243 })),
    ]);
    expect(during.map((a) => [a.status, a.problem, a.replayed])).toEqual([
      [409, 'idempotency-key-in-use', false],
      [409, 'idempotency-key-in-use', false], // the same JSON, keys reordered: the same fingerprint
      [400, 'idempotency-key-reused', false], // another charge is refused at once, in flight or not
    ]);
    const first = await slow;
    expect([first.status, first.replayed]).toEqual([201, false]);
    const after = await Promise.all([post(key, body), post(key, JSON.stringify({ amount: 4243 }))]);
    expect(after.map((a) => [bytes(a), a.replayed, a.problem])).toEqual([
      [bytes(first), true, null],
      [{ status: 400, contentType: 'application/problem+json', body: after[1]?.body }, false, 'idempotency-key-reused'],
    ]);
    expect(charges() - before).toBe(1);
  });
});
