/**
 * @module What the engine's tests share: a manual clock at T0, the memory store, and a way to let time pass.
 */
import { memoryStore } from '../stores/memory/index.js';
import { manualClock } from './clock.js';
import { createEngine, type IdempotencyEvent, type WorkResult } from './engine.js';
import type { IdempotencyStore } from './record.js';

export const T0 = Date.parse('2026-01-01T00:00:00Z');
export const DAY = 86_400_000;
export const answer = (status: number, text = `{"status":${status}}`): WorkResult<undefined> => ({
  response: { status, headers: [['content-type', 'application/json']], body: new TextEncoder().encode(text) },
});
export const setup = (
  options: { leaseMs?: number; waitForOutcomeMs?: number; store?: IdempotencyStore<undefined> } = {},
) => {
  const clock = manualClock(T0);
  const store = options.store ?? memoryStore();
  const events: IdempotencyEvent[] = [];
  const engine = createEngine({
    store,
    clock,
    ttlMs: DAY,
    leaseMs: options.leaseMs ?? 10_000,
    waitForOutcomeMs: options.waitForOutcomeMs ?? 0,
    onEvent: (e) => e.type !== 'store_op' && events.push(e),
  });
  return { clock, store, engine, events, request: { scope: 'acct_a', key: 'k1', fingerprint: 'f1' } };
};
export const tick = () => new Promise((resolve) => setTimeout(resolve, 0));
/** Moves the manual clock in small steps, letting the engine's timers and store calls run between them. */
export const step = async (clock: ReturnType<typeof manualClock>, ms: number, by = 25) => {
  for (let moved = 0; moved < ms; moved += by) {
    clock.advance(Math.min(by, ms - moved));
    await tick();
  }
};
