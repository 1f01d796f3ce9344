/**
 * The `reconcile` hook's finding goes to the history entry of the request whose takeover asked it, never to another
 * request for the same key: R1 takes a crashed key over under `'reconcile'` (the hook finds nothing: `not_done`) and
 * its work is held in the ledger; R2, sent meanwhile, gets 409 in use and finishes first. R1's entry says
 * `reconciled: "not_done"`, R2's (which asked nothing) `null`. Ordered by signals: the ledger call R1's work makes.
 */
import { describe, expect, it } from 'vitest';
import type { Ledger } from './ledger.js';
import { lab, switches } from './lab-takeover.test-kit.js';

/** The ledger with `insertOnce` held until `release` is called; `entered` resolves when the first call arrives. */
function heldLedger() {
  let entered!: () => void;
  let release!: () => void;
  const arrived = new Promise<void>((resolve) => (entered = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  const wrap = (ledger: Ledger): Ledger =>
    new Proxy(ledger, {
      get(target, name: string) {
        const value = Reflect.get(target, name) as unknown;
        if (typeof value !== 'function') return value;
        if (name !== 'insertOnce') return (value as (...args: unknown[]) => unknown).bind(target);
        return async (...args: Parameters<Ledger['insertOnce']>) => {
          entered();
          await released;
          return target.insertOnce(...args);
        };
      },
    });
  return { wrap, arrived, release };
}

describe("the reconcile finding belongs to the request that asked ('reconcile', ledger apart)", () => {
  it('R1 takes over and asks; R2 meanwhile gets 409 in use: R1 not_done, R2 null — one charge', async () => {
    const held = heldLedger();
    const { charge, history, rows, lapsed } = await lab(false, held.wrap);
    // The processor fails and the attempt crashes: the record stays in_progress, no charge made.
    await charge('k', { ...switches('reconcile', 'keyed'), 'idem-lab-fault': 'crash', 'idem-lab-fail': '503' });
    await lapsed('k');
    const r1 = charge('k', { ...switches('reconcile', 'keyed'), 'idem-lab-request': 'R1' });
    // R1's hook has answered (not_done) and its work has reached the ledger, where it waits.
    await held.arrived;
    const r2 = await charge('k', { ...switches('reconcile', 'keyed'), 'idem-lab-request': 'R2' });
    const body = (await r2.json()) as { type: string };
    expect([r2.status, body.type]).toEqual([409, 'urn:idem:problem:idempotency-key-in-use']);
    held.release();
    expect((await r1).status).toBe(201);
    const { entries } = await history();
    expect(entries.map((e) => [e.request, e.claim, e.work, e.answer?.status ?? null, e.reconciled])).toEqual([
      ['1', 'fresh', 'processor-failed', null, null],
      ['R1', 'taken-over', 'charged', 201, 'not_done'],
      ['R2', 'in-flight', null, 409, null],
    ]);
    expect(rows().map((r) => r.id)).toEqual([entries[1]?.charge?.id]);
  });
});
