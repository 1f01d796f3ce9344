import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { idempotency as fastifyIdempotency } from '../adapters/fastify/index.js';
import { recordPk } from '../core/key.js';
import { memoryStore } from '../stores/memory/index.js';
import { idempotency, type IdempotencyOptions } from './middleware.js';

const DAY = 86_400_000;
const post = (body: string, headers: Record<string, string> = {}, path = '/v1/charges') =>
  new Request(`http://x${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });

function counted(options: Partial<IdempotencyOptions<undefined>> = {}, status = 201) {
  const store = memoryStore();
  let runs = 0;
  const handle = idempotency({ store, scope: 'single-tenant', ttlMs: DAY, ...options })(async () => {
    runs++;
    return Response.json({ run: runs }, { status });
  });
  return { store, handle, runs: () => runs };
}

describe('keyHeader and key(request)', () => {
  it('reads the key from another header; the default header is then ignored', async () => {
    const { handle, runs } = counted({ keyHeader: 'X-Request-Id', required: true });
    expect((await handle(post('{}', { 'x-request-id': 'r1' }))).status).toBe(201);
    const replay = await handle(post('{}', { 'x-request-id': 'r1' }));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    const missing = await handle(post('{}', { 'idempotency-key': 'r1' }));
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { detail: string }).detail).toBe(
      'POST requests to this route need an X-Request-Id header.',
    );
    expect(runs()).toBe(1);
  });

  it('takes the key from a function of the request (here a body-independent query parameter)', async () => {
    const { handle, runs } = counted({ key: (request) => new URL(request.url).searchParams.get('op') });
    await handle(post('{}', {}, '/v1/charges?op=o1'));
    const replay = await handle(post('{}', {}, '/v1/charges?op=o1'));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    await handle(post('{}', {}, '/v1/charges'));
    await handle(post('{}', {}, '/v1/charges'));
    expect(runs()).toBe(3);
  });

  it('works in the Fastify adapter, which reads the body before parsing only for keyed requests', async () => {
    const app = Fastify();
    let runs = 0;
    await app.register(
      fastifyIdempotency({ store: memoryStore(), scope: 'single-tenant', ttlMs: DAY, keyHeader: 'x-op' }),
    );
    app.post('/c', async (request, reply) => reply.code(201).send({ run: ++runs, body: request.body }));
    const send = () =>
      app.inject({
        method: 'POST',
        url: '/c',
        headers: { 'x-op': 'o1', 'content-type': 'application/json' },
        payload: '{"a":1}',
      });
    const first = await send();
    const second = await send();
    expect([first.statusCode, second.statusCode]).toEqual([201, 201]);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(second.body).toBe('{"run":1,"body":{"a":1}}');
    expect(runs).toBe(1);
    await app.close();
  });

  it('names a bad option', () => {
    const store = memoryStore();
    expect(() => idempotency({ store, scope: 'single-tenant', keyHeader: 'bad header' })).toThrow(
      'Expected `keyHeader` to be an HTTP header name, got "bad header".',
    );
    expect(() => idempotency({ store, scope: 'single-tenant', fingerprintFields: { exclude: 'ts' } as never })).toThrow(
      'Expected `fingerprintFields` to be { include: string[] } or { exclude: string[] }',
    );
    expect(() => idempotency({ store, scope: 'single-tenant', classify: 400 as never })).toThrow(
      'Expected `classify` to be a function, got 400.',
    );
  });
});

describe('fingerprint customisation', () => {
  it('exclude: a retry that differs only in a client timestamp is the same request', async () => {
    const { handle, runs } = counted({ fingerprintFields: { exclude: ['sent_at'] } });
    await handle(post('{"amount":500,"sent_at":"10:00:00"}', { 'idempotency-key': 'k' }));
    const retry = await handle(post('{"amount":500,"sent_at":"10:00:05"}', { 'idempotency-key': 'k' }));
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    const other = await handle(post('{"amount":501,"sent_at":"10:00:05"}', { 'idempotency-key': 'k' }));
    expect(other.status).toBe(400);
    expect(runs()).toBe(1);
  });

  it('include: only the chosen fields count, and a big number keeps every digit', async () => {
    const { handle, runs } = counted({ fingerprintFields: { include: ['amount'] } });
    await handle(post('{"amount":12345678901234567890,"note":"a"}', { 'idempotency-key': 'k' }));
    expect((await handle(post('{"amount":12345678901234567890,"note":"b"}', { 'idempotency-key': 'k' }))).status).toBe(
      201,
    );
    // 12345678901234567891 parses to the same double as ...890: a fingerprint over parsed JSON would replay it.
    expect((await handle(post('{"amount":12345678901234567891,"note":"a"}', { 'idempotency-key': 'k' }))).status).toBe(
      400,
    );
    expect(runs()).toBe(1);
  });

  it('fingerprintBody: the caller chooses what stands for the payload', async () => {
    const { handle, runs } = counted({
      fingerprintBody: (body) => String((JSON.parse(new TextDecoder().decode(body)) as { order: string }).order),
    });
    await handle(post('{"order":"o1","x":1}', { 'idempotency-key': 'k' }));
    expect(
      (await handle(post('{"order":"o1","x":2}', { 'idempotency-key': 'k' }))).headers.get('idempotent-replayed'),
    ).toBe('true');
    expect((await handle(post('{"order":"o2","x":1}', { 'idempotency-key': 'k' }))).status).toBe(400);
    expect(runs()).toBe(1);
  });
});

describe('ttlFor: a record lifetime per request', () => {
  it('stores the record with the request’s own ttl', async () => {
    const { handle, store } = counted({
      ttlFor: (request) => (request.headers.get('x-short') ? 60_000 : undefined),
      leaseMs: 5_000,
    });
    const before = Date.now();
    await handle(post('{}', { 'idempotency-key': 'short', 'x-short': '1' }));
    await handle(post('{}', { 'idempotency-key': 'long' }));
    const short = await store.get(recordPk('single-tenant', 'short'));
    const long = await store.get(recordPk('single-tenant', 'long'));
    expect((short?.expiresAt ?? 0) - (short?.claimedAt ?? 0)).toBe(60_000);
    expect((long?.expiresAt ?? 0) - (long?.claimedAt ?? 0)).toBe(DAY);
    expect(short?.claimedAt).toBeGreaterThanOrEqual(before);
  });

  it('a ttl not above the lease is a 500 and runs nothing', async () => {
    const { handle, runs } = counted({ ttlFor: () => 1_000, leaseMs: 5_000 });
    expect((await handle(post('{}', { 'idempotency-key': 'k' }))).status).toBe(500);
    expect(runs()).toBe(0);
  });
});

describe('classify: Stripe’s "a validation failure is not saved"', () => {
  it('releases a 400 so the client can fix its payload and retry with the same key', async () => {
    const store = memoryStore();
    let runs = 0;
    const handle = idempotency({
      store,
      scope: 'single-tenant',
      ttlMs: DAY,
      classify: (status) => (status === 400 || status === 422 ? 'release' : undefined),
    })(async (request) => {
      runs++;
      const { amount } = (await request.json()) as { amount?: number };
      return amount
        ? Response.json({ amount }, { status: 201 })
        : Response.json({ error: 'amount required' }, { status: 400 });
    });
    expect((await handle(post('{}', { 'idempotency-key': 'k' }))).status).toBe(400);
    expect(await store.get(recordPk('single-tenant', 'k'))).toBeNull();
    const fixed = await handle(post('{"amount":500}', { 'idempotency-key': 'k' }));
    expect(fixed.status).toBe(201);
    expect((await handle(post('{"amount":500}', { 'idempotency-key': 'k' }))).headers.get('idempotent-replayed')).toBe(
      'true',
    );
    expect(runs).toBe(2);
  });

  it('without it, the handler’s 400 is final and the fixed payload is a reused key', async () => {
    const { handle } = counted({}, 400);
    await handle(post('{}', { 'idempotency-key': 'k' }));
    expect((await handle(post('{"amount":500}', { 'idempotency-key': 'k' }))).status).toBe(400);
    const problem = (await (await handle(post('{"amount":500}', { 'idempotency-key': 'k' }))).json()) as {
      type: string;
    };
    expect(problem.type).toBe('urn:idem:problem:idempotency-key-reused');
  });
});
