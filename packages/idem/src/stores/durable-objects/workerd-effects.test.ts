/**
 * Declared `effects` on the Durable Objects store, on workerd: the store has no transaction to commit them with the
 * record, so `declare({ effects })` throws CONFIG_INVALID in the handler, at once. Before, `complete` refused them
 * after the work ran: the client got 503 and every retry after the lease ran the work again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorkerd, workerdBinary, type Workerd } from './workerd.test-kit.js';

const SOURCE = `
import { idempotency } from 'idem/http';
import { durableObjectsStore } from 'idem/durable-objects';
export { IdempotencyDurableObject } from 'idem/durable-objects';
const runs = new Map();
export default {
  async fetch(request, env) {
    const key = request.headers.get('idempotency-key');
    if (request.method === 'GET') return Response.json({ runs: runs.get(key) ?? 0 });
    const store = durableObjectsStore({ namespace: env.IDEM, prefix: 'effects' });
    const handle = idempotency({ store, leaseMs: 1000, scope: 'single-tenant' })(async (_request, context) => {
      runs.set(key, (runs.get(key) ?? 0) + 1);
      let refused = null;
      try {
        context.declare({ effects: () => undefined });
      } catch (error) {
        refused = error.code + ': ' + error.message;
      }
      return Response.json({ run: runs.get(key), refused }, { status: 201 });
    });
    return handle(request);
  },
};`;

const binary = workerdBinary();

describe.skipIf('error' in binary)('durable-objects store on workerd: declared effects', () => {
  let workerd: Workerd;
  beforeAll(async () => {
    if ('path' in binary) workerd = await startWorkerd(binary.path, { source: SOURCE });
  });
  afterAll(() => workerd?.stop());

  it('declare({ effects }) throws in the handler; the answer is stored once and replayed, the work run once', async () => {
    const key = crypto.randomUUID();
    const post = async () => {
      const response = await fetch(`${workerd.base}/v1/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: '{"amount":100}',
        signal: AbortSignal.timeout(20_000),
      });
      const body: unknown = await response.json();
      return [response.status, response.headers.get('idempotent-replayed'), body];
    };
    const body = {
      run: 1,
      refused:
        'CONFIG_INVALID: Expected `effects` to be absent with the durable-objects store: it has no transaction to commit them with the record (key the work’s own write on the record id instead).',
    };
    expect(await post()).toEqual([201, null, body]);
    expect(await post()).toEqual([201, 'true', body]);
    const runs = await fetch(`${workerd.base}/runs`, { headers: { 'idempotency-key': key } });
    expect(await runs.json()).toEqual({ runs: 1 });
  }, 60_000);
});
