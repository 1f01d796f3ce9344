import { describe, expect, it } from 'vitest';
import { answer, DAY, setup, step } from './engine.test-kit.js';
import { recordPk } from './key.js';

/** A first attempt holding the lease, and a second attempt (its work answers 201 `second`) waiting on it. */
async function waiting(options: { waitForOutcomeMs: number; leaseMs: number }) {
  const { engine, request, clock } = setup(options);
  const first = await engine.begin(request);
  if (first.kind !== 'lease') throw new Error('expected a lease');
  const counted = { runs: 0 };
  const waiter = engine.run(request, async () => {
    counted.runs++;
    return answer(201, 'second');
  });
  return { clock, lease: first.lease, waiter, counted };
}

describe('waitForOutcomeMs when the first attempt ends retryable or is released', () => {
  for (const ending of ['failed-retryable', 'release'] as const) {
    it(`runs the waiter's work on the freed key (${ending}) instead of a stale 409`, async () => {
      const { clock, lease, waiter, counted } = await waiting({ waitForOutcomeMs: 1_000, leaseMs: 10_000 });
      // The waiter polls with the injected clock; the first attempt ends inside its last poll interval.
      await step(clock, 900);
      await (ending === 'release' ? lease.release() : lease.complete(answer(503)));
      await step(clock, 200);
      const result = await waiter;
      expect(counted.runs).toBe(1);
      expect(result.replayed).toBe(false);
      expect(new TextDecoder().decode(result.response.body)).toBe('second');
    });
  }
});

describe('waitForOutcomeMs with a holder that keeps renewing', () => {
  it('waits past the first lease it saw, until the outcome, and replays it', async () => {
    const { clock, lease, waiter, counted } = await waiting({ waitForOutcomeMs: 5_000, leaseMs: 1_000 });
    // The holder renews (every leaseMs / 3) well past its first lease, then answers at 2.5 s.
    await step(clock, 2_500);
    await lease.complete(answer(201, 'first'));
    await step(clock, 600);
    const result = await waiter;
    expect(counted.runs).toBe(0);
    expect([result.replayed, new TextDecoder().decode(result.response.body)]).toEqual([true, 'first']);
  });

  it("stops waiting when the holder's lease lapses (it died) and takes the key over with the same id", async () => {
    const { engine, request, clock, store } = setup({ waitForOutcomeMs: 30_000, leaseMs: 1_000 });
    // A holder that died right after its claim: a record in progress that nobody renews.
    const pk = recordPk(request.scope, request.key);
    const dead = await store.claim({
      pk,
      ...request,
      token: 't-dead',
      id: 'rec-1',
      now: clock.now(),
      leaseMs: 1_000,
      ttlMs: DAY,
    });
    expect(dead.kind).toBe('claimed');
    let runs = 0;
    const taker = engine.run(request, async ({ id, reclaimed }) => {
      runs++;
      return answer(201, `${id} ${String(reclaimed)}`);
    });
    // Polls back off to 500 ms: by 2 s one has seen the lapsed lease.
    await step(clock, 2_000);
    const result = await taker;
    expect(runs).toBe(1);
    expect(new TextDecoder().decode(result.response.body)).toBe('rec-1 true');
  });
});
