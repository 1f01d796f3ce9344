/**
 * The Web layer's takeover scene the takeover tests share: gate A claims a charge and makes its effect, is stopped
 * on its own clock, and gate B, its clock ten leases on, gets the same request.
 */
import { manualClock } from '../../packages/idem/src/index.js';
import { idempotency, type IdempotencyOptions } from '../../packages/idem/src/http/index.js';
import { waitFor } from '../../packages/idem/src/testing/fixtures.js';

export const charge = (key = 'order-9') =>
  new Request('http://x/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: '{"amount":500}',
  });

/** The `type` of a problem document. */
export const typeOf = async (response: Response) => ((await response.json()) as { type: string }).type;

/**
 * A runs `first` (after counting its effect) under `options` plus `stopA`, on a clock from `t0`; once the effect is
 * made the clock moves `stopAfterMs`; B, on `options` at `t0 + 10 × leaseMs`, counts an effect and answers 201 'B ran'.
 * `a` is A's answer, or the error its call rejected with.
 */
export async function webTakeover(
  options: IdempotencyOptions<never> & { readonly leaseMs: number },
  {
    t0,
    stopAfterMs,
    stopA = {},
    first,
  }: {
    readonly t0: number;
    readonly stopAfterMs: number;
    readonly stopA?: { readonly maxHoldMs?: number };
    readonly first: (signal: AbortSignal) => Promise<Response>;
  },
): Promise<{ a: Response | Error; b: Response; effects: number }> {
  let effects = 0;
  const clockA = manualClock(t0);
  const pending = idempotency({ ...options, ...stopA, clock: clockA })((_request, { signal }) => {
    effects++;
    return first(signal);
  })(charge());
  await waitFor('A made its effect', () => effects === 1);
  clockA.advance(stopAfterMs);
  // A handler's answer that failed on its way rejects A's call (the framework answers 500): the error is A's result.
  const a = await pending.catch((error: Error) => error);
  const b = await idempotency({ ...options, clock: manualClock(t0 + 10 * options.leaseMs) })(() => {
    effects++;
    return new Response('B ran', { status: 201 });
  })(charge());
  return { a, b, effects };
}
