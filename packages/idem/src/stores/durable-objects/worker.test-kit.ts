/**
 * @module The Worker the Durable Objects tests run on workerd (bundled by workerd.test-kit.ts): the store
 * conformance suite inside the isolate (`GET /conformance`, on the Vitest shim), and `idem/http` on the store for
 * the requests the tests send (`POST /v1/charges`), with routes that count executions, hold the work until told,
 * and drive the store at chosen instants.
 */
import { idempotency } from '../../http/index.js';
import { describeStoreConformance } from '../../testing/index.js';
import { run } from '../../../../../test/runtimes/vitest-shim.js';
import type { ClaimRequest, Outcome } from '../contract.js';
import { durableObjectsStore, IdempotencyDurableObject, type DurableObjectNamespaceLike } from './index.js';

export { IdempotencyDurableObject };

/**
 * The conformance suite dates its records 2026-01-01, long past by the wall clock the alarm reads: its objects'
 * alarm does nothing, so that only the suite's own calls (at the suite's instants) change its records.
 */
export class ConformanceObject extends IdempotencyDurableObject {
  override async alarm(): Promise<void> {}
}

interface Env {
  readonly IDEM: DurableObjectNamespaceLike;
  readonly CONFORMANCE: DurableObjectNamespaceLike;
}

/**
 * Executions per idempotency key; the ledger, one charge per record id (a rerun with the same id overwrites, as a
 * unique constraint would refuse it); per hold (the `test-hold` header), the works waiting on it until let go.
 */
const executions = new Map<string, number>();
const ledger = new Map<string, { key: string; amount: number }>();
const holds = new Map<string, { released: boolean; waiting: Array<() => void> }>();
const hold = (name: string) => holds.get(name) ?? holds.set(name, { released: false, waiting: [] }).get(name)!;

const store = (env: Env) => durableObjectsStore({ namespace: env.IDEM });

const charges = (env: Env) =>
  idempotency({ store: store(env), scope: 'single-tenant', required: true })(async (request, { id }) => {
    const key = request.headers.get('idempotency-key') ?? '';
    const n = (executions.get(key) ?? 0) + 1;
    executions.set(key, n);
    const name = request.headers.get('test-hold');
    const held = name === null ? undefined : hold(name);
    if (held && !held.released) await new Promise<void>((resolve) => held.waiting.push(resolve));
    const { amount } = (await request.json()) as { amount: number };
    ledger.set(id, { key, amount });
    return Response.json({ id: `ch_${crypto.randomUUID()}`, amount, execution: n }, { status: 201 });
  });

/** Calls the store at the instants the test chose: the lease takeover, as the stale holder and the new one see it. */
async function takeover(env: Env): Promise<unknown> {
  const s = store(env);
  const now = Date.now();
  const key = crypto.randomUUID();
  const base = { pk: `IDEMPOTENCY#takeover#${key}`, scope: 'takeover', key, fingerprint: 'f'.repeat(64) };
  const first: ClaimRequest = { ...base, token: 't1', id: 'id1', now, leaseMs: 1_000, ttlMs: 60_000 };
  const done = (body: number): Outcome => ({
    status: 'succeeded',
    retryable: false,
    resultId: `ch_${body}`,
    response: { status: 201, headers: [['content-type', 'application/json']], body: new Uint8Array([body]) },
  });
  const claimed = await s.claim(first);
  const whileLive = await s.claim({ ...first, token: 't2', id: 'id2', now: now + 999 });
  const taken = await s.claim({ ...first, token: 't2', id: 'id2', now: now + 1_000 });
  const staleRenew = await s.renew({
    pk: base.pk,
    token: 't1',
    now: now + 1_001,
    leaseMs: 1_000,
    expiresAt: now + 60_000,
  });
  const staleComplete = await s.complete({ pk: base.pk, token: 't1', now: now + 1_002, outcome: done(1) });
  const staleRelease = await s.release({ pk: base.pk, token: 't1' });
  const newComplete = await s.complete({ pk: base.pk, token: 't2', now: now + 1_003, outcome: done(2) });
  const record = await s.get(base.pk);
  return {
    claimed: claimed.kind,
    whileLive: [whileLive.kind, whileLive.record.token],
    taken: [taken.kind, taken.record.token, taken.record.id, taken.record.claimedAt - now],
    staleRenew,
    staleComplete,
    staleRelease,
    newComplete,
    stored: [record?.status, record?.token, record?.resultId, [...(record?.response?.body ?? [])]],
  };
}

/** Records claimed at the wall clock, one per `ttlMs`, in one object, read back at once: the alarm test then waits. */
async function expiring(env: Env, ttls: number[]): Promise<unknown> {
  const s = store(env);
  const now = Date.now();
  const records = [];
  for (const ttlMs of ttls) {
    const key = crypto.randomUUID();
    const pk = `IDEMPOTENCY#alarm#${key}`;
    const fingerprint = 'f'.repeat(64);
    await s.claim({ pk, scope: 'alarm', key, fingerprint, token: 't', id: 'i', now, leaseMs: ttlMs, ttlMs });
    records.push({ pk, status: (await s.get(pk))?.status ?? null });
  }
  return records;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    switch (url.pathname) {
      case '/conformance': {
        const shards = Number(url.searchParams.get('shards') ?? 1);
        describeStoreConformance({
          name: 'durable-objects',
          // A prefix per store: its objects are its own, so the sweep and list cases count only its records.
          create: async () =>
            durableObjectsStore({ namespace: env.CONFORMANCE, shards, prefix: `${crypto.randomUUID()}:` }),
        });
        return Response.json(await run());
      }
      case '/v1/charges':
        return charges(env)(request);
      case '/test/executions': {
        const key = url.searchParams.get('key') ?? '';
        const rows = [...ledger.values()].filter((charge) => charge.key === key).length;
        return Response.json({ executions: executions.get(key) ?? 0, ledgerRows: rows });
      }
      case '/test/release': {
        // Let go of the works held so far, and of any that reaches the hold later.
        const held = hold(url.searchParams.get('hold') ?? '');
        held.released = true;
        for (const resolve of held.waiting.splice(0)) resolve();
        return Response.json({ released: true });
      }
      case '/test/takeover':
        return Response.json(await takeover(env));
      case '/test/expiring':
        return Response.json(await expiring(env, (url.searchParams.get('ttlMs') ?? '').split(',').map(Number)));
      case '/test/get': {
        const record = await store(env).get(url.searchParams.get('pk') ?? '');
        return Response.json({ status: record?.status ?? null });
      }
    }
    return new Response('not found', { status: 404 });
  },
};
