/**
 * `verdict()` as docs/CONSUMERS.md shows it (`verdict.ts`): which errors dead-letter, defer or retry, and that
 * every delay is a whole number of milliseconds in the documented range — JetStream treats a fractional
 * `nak(delay)` as no delay and redelivers at once.
 */
import { describe, expect, it } from 'vitest';
import { IdempotencyError, IdempotentFailure, type IdempotencyErrorCode } from 'idem';
import { verdict } from './verdict.js';

const refused = (code: IdempotencyErrorCode, retryAfterMs?: number) =>
  new IdempotencyError(code, `refused: ${code}`, retryAfterMs === undefined ? {} : { retryAfterMs });

describe('verdict(error)', () => {
  it('dead-letters a final failure (named as the first error), a fingerprint mismatch and a bad key', () => {
    expect(verdict(new IdempotentFailure('Declined', 'amount 7 is over the limit'))).toEqual({
      action: 'dead-letter',
      reason: 'Declined: amount 7 is over the limit',
    });
    expect(
      (['FINGERPRINT_MISMATCH', 'KEY_MISSING', 'KEY_INVALID', 'CONFIG_INVALID'] as const).map(
        (code) => verdict(refused(code)).action,
      ),
    ).toEqual(['dead-letter', 'dead-letter', 'dead-letter', 'dead-letter']);
  });

  it('retries any other error after 1 s', () => {
    expect(verdict(new Error('bank: connection reset by peer'))).toEqual({
      action: 'retry',
      reason: 'Error: bank: connection reset by peer',
      delayMs: 1_000,
    });
  });

  it('defers IN_FLIGHT, STORE_UNAVAILABLE and LEASE_LOST by the clamped retryAfterMs plus up to 250 ms, in whole ms', () => {
    const cases: Array<[IdempotencyErrorCode, number | undefined, number]> = [
      ['IN_FLIGHT', 2_345.678, 2_345.678],
      ['IN_FLIGHT', 12.5, 250],
      ['IN_FLIGHT', 60_000, 5_000],
      ['STORE_UNAVAILABLE', undefined, 1_000],
      ['LEASE_LOST', 0, 250],
    ];
    for (const [code, retryAfterMs, base] of cases) {
      for (let i = 0; i < 50; i++) {
        const next = verdict(refused(code, retryAfterMs));
        expect(next.action).toBe('defer');
        if (next.action !== 'defer') return;
        expect(Number.isInteger(next.delayMs)).toBe(true);
        expect(next.delayMs).toBeGreaterThanOrEqual(Math.round(base));
        expect(next.delayMs).toBeLessThanOrEqual(Math.round(base + 250));
      }
    }
  });
});
