/**
 * A handler that answered, whose answer then failed on its way (a body stream that errors, a response destroyed
 * mid-write), may have had its effect: under `takeover: 'reconcile'` or `'quarantine'` nothing is written and the
 * key lapses into a takeover (the policy answers), instead of a retryable failure that re-runs the work unasked.
 * Under `'rerun'` it stays a retryable failure. On the Web layer, Express and Fastify.
 */
import { Readable } from 'node:stream';
import express from 'express';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { idempotency as expressIdempotency } from '../../packages/idem/src/adapters/express/index.js';
import { idempotency as fastifyIdempotency } from '../../packages/idem/src/adapters/fastify/index.js';
import { recordPk } from '../../packages/idem/src/core/key.js';
import { memoryStore } from '../../packages/idem/src/stores/memory/index.js';
import { typeOf, webTakeover } from './web-kit.js';

const LEASE = 1_000;
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** A 201 whose body sends its first bytes, then fails. */
const failingBody = () => {
  let sent = false;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent) return controller.error(new Error('upstream reset'));
      sent = true;
      controller.enqueue(new TextEncoder().encode('{"id":'));
    },
  });
  return new Response(body, { status: 201, headers: { 'content-type': 'application/json' } });
};

describe('the Web layer: a body that fails after the handler answered', () => {
  it.each([
    ['quarantine', 409, 'urn:idem:problem:idempotency-outcome-unknown'],
    ['reconcile', 201, 'from the ledger'],
  ] as const)('under %s the retry is a takeover (%i %s); one effect', async (takeover, status, body) => {
    const reconcile = () => ({
      state: 'succeeded' as const,
      response: new Response('from the ledger', { status: 201 }),
    });
    const options = {
      store: memoryStore(),
      scope: 'single-tenant',
      leaseMs: LEASE,
      ttlMs: 86_400_000,
      takeover,
      reconcile,
    } as const;
    const { a, b, effects } = await webTakeover(options, {
      t0: Date.now() - 20 * LEASE,
      stopAfterMs: 0,
      first: async () => failingBody(),
    });
    expect([
      (a as Response).status,
      b.status,
      takeover === 'quarantine' ? await typeOf(b) : await b.text(),
      effects,
    ]).toEqual([500, status, body, 1]);
  });
});

/** The store's view of the key: its status and whether it may run again. */
async function recordOf(store: ReturnType<typeof memoryStore>) {
  const kept = await store.get(recordPk('single-tenant', 'k1'));
  return kept && [kept.status, kept.retryable];
}

const post = (port: number) =>
  fetch(`http://127.0.0.1:${port}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': 'k1' },
    body: '{"a":1}',
  }).then(
    (response) => response.status,
    () => 'dropped',
  );

describe.each([
  ['quarantine', 409, ['in_progress', false], 1],
  ['reconcile', 409, ['in_progress', false], 1],
  ['rerun', null, ['failed', true], 2],
] as const)('Express and Fastify, %s: a response destroyed mid-body', (takeover, retried, record, effects) => {
  const options = (store: ReturnType<typeof memoryStore>) => ({
    store,
    scope: 'single-tenant' as const,
    ttlMs: 86_400_000,
    takeover: takeover,
    reconcile: () => ({ state: 'not_done' as const }),
    onError: () => undefined,
  });

  it(`Express: the connection drops, the retry gets ${retried ?? 'dropped'}; the record is ${record[0]}; ${effects} effect(s)`, async () => {
    const store = memoryStore();
    let charges = 0;
    const app = express();
    app.post('/charges', expressIdempotency(options(store)), express.json(), (_req, res) => {
      charges++;
      res.status(201).type('application/json');
      res.write('{"id":"ch_1",', () => res.destroy(new Error('upstream reset')));
    });
    const server = app.listen(0, '127.0.0.1');
    closers.push(() => new Promise((done) => server.close(done)));
    await new Promise((ready) => server.once('listening', ready));
    const { port } = server.address() as { port: number };
    const first = await post(port);
    const second = await post(port);
    expect([first, second, await recordOf(store), charges]).toEqual(['dropped', retried ?? 'dropped', record, effects]);
  });

  it(`Fastify: 500, then the retry gets ${retried ?? 500}; the record is ${record[0]}; ${effects} effect(s)`, async () => {
    const store = memoryStore();
    let charges = 0;
    const app = Fastify({ forceCloseConnections: true });
    closers.push(() => app.close());
    await app.register(fastifyIdempotency(options(store)));
    app.post('/charges', async (_request, reply) => {
      charges++;
      let n = 0;
      const body = new Readable({
        read() {
          if (n++ === 0) this.push('{"id":');
          else this.destroy(new Error('upstream reset'));
        },
      });
      return reply.code(201).type('application/json').send(body);
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };
    const first = await post(port);
    const second = await post(port);
    expect([first, second, await recordOf(store), charges]).toEqual([500, retried ?? 500, record, effects]);
  });
});
