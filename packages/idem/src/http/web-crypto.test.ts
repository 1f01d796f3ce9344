/**
 * The Web layer and `idempotent()` where the fingerprint is WebCrypto's (a promise, not a string): the modules are
 * evaluated afresh with `process.getBuiltinModule` taken away, as on a runtime without `node:crypto`. Charge,
 * 409 while it runs, byte-identical replay, mismatch: the same answers as on the native path.
 */
import { describe, expect, it } from 'vitest';
import { withoutNodeCrypto } from '../core/no-node-crypto.test-kit.js';
import { countedWork, signal } from './counted.test-kit.js';

const [http, idem, memory] = await withoutNodeCrypto(() =>
  Promise.all([import('./index.js'), import('../index.js'), import('../stores/memory/index.js')]),
);

const charge = (key: string, amount: number) =>
  new Request('http://api.test/v1/charges', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ amount, currency: 'usd' }),
  });

describe('the fingerprint by WebCrypto', () => {
  it('is what the HTTP layer claims with: one run, 409 meanwhile, replay, mismatch', async () => {
    expect(() => idem.fingerprint({ method: 'POST', path: '/', body: new Uint8Array() })).toThrow(
      'fingerprint() needs node:crypto',
    );
    const release = signal();
    const { seen, started, run } = countedWork(release.promise);
    const handle = http.idempotency({ store: memory.memoryStore(), scope: 'single-tenant' })(async (request, ctx) => {
      const { amount } = (await request.json()) as { amount: number };
      const { id } = await run(ctx.reclaimed);
      return Response.json({ id, amount }, { status: 201 });
    });
    const first = handle(charge('k-1', 500));
    await started;
    const during = await handle(charge('k-1', 500));
    expect(during.status).toBe(409);
    release.resolve();
    const answered = await first;
    const body = await answered.text();
    expect([answered.status, body]).toEqual([201, '{"id":"ch_1","amount":500}']);
    const replay = await handle(charge('k-1', 500));
    expect([replay.status, await replay.text(), replay.headers.get('idempotent-replayed')]).toEqual([
      201,
      body,
      'true',
    ]);
    const mismatch = await handle(charge('k-1', 501));
    expect(mismatch.status).toBe(400);
    expect(seen.runs).toBe(1);
  });

  it('is what idempotent() claims with: a second call replays, other input is a mismatch', async () => {
    let runs = 0;
    const pay = idem.idempotent(async (input: { order: string; amount: number }) => ({ n: ++runs, ...input }), {
      store: memory.memoryStore(),
      scope: 'single-tenant',
      key: (input) => input.order,
    });
    expect(await pay({ order: 'o-1', amount: 5 })).toEqual({ n: 1, order: 'o-1', amount: 5 });
    expect(await pay({ order: 'o-1', amount: 5 })).toEqual({ n: 1, order: 'o-1', amount: 5 });
    await expect(pay({ order: 'o-1', amount: 6 })).rejects.toMatchObject({ code: 'FINGERPRINT_MISMATCH' });
    expect(runs).toBe(1);
  });
});
