/**
 * @module Entry bundled for Cloudflare's workerd by `runtimes.test.ts`: the Web-standard layer
 * (`idempotency(options)(handler)`) on the memory store, as a module worker; the charges' responses are sealed
 * (`sealed()`, AES-GCM through workerd's WebCrypto). It is built with esbuild's neutral platform and no external
 * modules, so a `node:` import anywhere on this path fails the build. `POST /v1/charges`
 * counts its executions; `POST /v1/renewing` holds its lease past a renewal; `GET /test/executions` reports the
 * executions with what the isolate offers (WebCrypto, `process`) and a fixed request's fingerprint.
 */
import { idempotency } from '../../packages/idem/src/http/index.js';
import { sealed } from '../../packages/idem/src/core/sealed.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { fingerprint, fingerprintAsync } from '../../packages/idem/src/core/fingerprint.js';

let executions = 0;

const sealedStore = sealed(memoryStore(), { keys: [{ id: 'workerd', key: new Uint8Array(32).fill(7) }] });
const charges = idempotency({ store: sealedStore, scope: 'single-tenant', required: true })(async (request, { id }) => {
  executions += 1;
  const n = executions;
  const { amount, currency } = (await request.json()) as { amount: number; currency: string };
  return Response.json(
    { id: `ch_${n}`, amount, currency, record: id, nonce: crypto.randomUUID() },
    { status: 201, headers: { location: `/v1/charges/ch_${n}` } },
  );
});

/**
 * A lease renewed while the work runs: the engine's timer fires on workerd's `setTimeout`, which returns a number
 * (no `unref`). The handler waits for the store to see the renewal (a signal), or gives up after 5 s.
 */
let renewed = () => {};
const renewal = new Promise<void>((resolve) => (renewed = resolve));
const renewingStore = memoryStore({ onRoundTrip: (trip) => void (trip.op === 'renew' && renewed()) });
const renewing = idempotency({ store: renewingStore, scope: 'single-tenant', leaseMs: 1_000, renewEveryMs: 20 })(
  async () => {
    executions += 1;
    const outcome = await Promise.race([
      renewal.then(() => 'renewed'),
      new Promise<string>((resolve) => setTimeout(() => resolve('no renewal within 5 s'), 5_000)),
    ]);
    return Response.json({ lease: outcome }, { status: 201 });
  },
);

const FIXED = new TextEncoder().encode('{"b":1,"a":"x"}');

export default {
  async fetch(request: Request): Promise<Response> {
    const { pathname } = new URL(request.url);
    if (pathname === '/v1/charges') return charges(request);
    if (pathname === '/v1/renewing') return renewing(request);
    if (pathname === '/test/executions') {
      // A fixed request's fingerprint, by WebCrypto here: the test compares it with node:crypto's.
      const input = { method: 'POST', path: '/v1/charges', contentType: 'application/json', body: FIXED };
      let sync: string;
      try {
        sync = fingerprint(input);
      } catch (error) {
        sync = (error as { code?: string }).code ?? String(error);
      }
      return Response.json({
        executions,
        webCrypto: typeof crypto.subtle.digest === 'function' && typeof crypto.randomUUID === 'function',
        process: typeof (globalThis as { process?: unknown }).process,
        fingerprint: await fingerprintAsync(input),
        sync,
      });
    }
    return new Response('not found', { status: 404 });
  },
};
