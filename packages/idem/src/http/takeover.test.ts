/**
 * The takeover policy through the Web layer (docs/DESIGN.md: Takeover policy). The first attempt runs on a gate
 * whose clock never moves: it records its effect and then freezes mid-work, so its lease is never renewed (a dead
 * holder). The retry runs on a second gate over the same store, whose clock is moved past that lease.
 */
import { describe, expect, it } from 'vitest';
import { recordPk } from '../core/key.js';
import type { ReconcileContext } from '../core/takeover.js';
import { memoryStore } from '../stores/memory/index.js';
import { waitFor } from '../testing/fixtures.js';
import { idempotency } from './middleware.js';
import { afterDeadHolder, charge, KEY, LEASE } from './takeover.test-kit.js';

const text = (body: string) => new TextEncoder().encode(body);

describe("takeover: 'reconcile'", () => {
  it('succeeded: the answer is recorded and replayed, the handler does not run; the hook got id, scope, key, attempt 1', async () => {
    const asked: ReconcileContext[] = [];
    const t = await afterDeadHolder({
      takeover: 'reconcile',
      reconcile: (context) => {
        asked.push(context);
        return { state: 'succeeded', response: Response.json({ charged: 'from-ledger' }, { status: 201 }) };
      },
    });
    const first = await t.retry(charge());
    expect([first.status, await first.text(), first.headers.get('idempotent-replayed')]).toEqual([
      201,
      '{"charged":"from-ledger"}',
      'true',
    ]);
    const again = await t.retry(charge());
    expect([again.status, await again.text()]).toEqual([201, '{"charged":"from-ledger"}']);
    expect(t.runs()).toBe(0);
    expect(asked.map(({ id, scope, key, attempt }) => ({ id, scope, key, attempt }))).toEqual([
      { id: t.firstId(), scope: 'single-tenant', key: KEY, attempt: 1 },
    ]);
    expect((await t.store.get(recordPk('single-tenant', KEY)))?.status).toBe('succeeded');
  });

  it('failed: recorded as a final failure with its response, replayed; the handler does not run', async () => {
    const t = await afterDeadHolder({
      takeover: 'reconcile',
      reconcile: () => ({
        state: 'failed',
        response: { status: 402, headers: [['content-type', 'application/json']], body: text('{"declined":true}') },
      }),
    });
    const first = await t.retry(charge());
    expect([first.status, await first.text()]).toEqual([402, '{"declined":true}']);
    const again = await t.retry(charge());
    expect([again.status, await again.text()]).toEqual([402, '{"declined":true}']);
    const record = await t.store.get(recordPk('single-tenant', KEY));
    expect([record?.status, record?.retryable, t.runs()]).toEqual(['failed', false, 0]);
  });

  it('not_done: the handler runs once, under the same id, as a reclaim', async () => {
    const t = await afterDeadHolder({ takeover: 'reconcile', reconcile: () => ({ state: 'not_done' }) });
    const first = await t.retry(charge());
    expect(first.status).toBe(201);
    expect(await first.json()).toEqual({ charged: t.firstId() });
    expect(t.seen).toEqual([{ id: t.firstId(), reclaimed: true }]);
    const again = await t.retry(charge());
    expect([again.status, again.headers.get('idempotent-replayed'), t.runs()]).toEqual([201, 'true', 1]);
  });

  it('a hook that throws: 503, nothing runs, the record stays in_progress; the next takeover asks again (attempt 2)', async () => {
    const attempts: number[] = [];
    const t = await afterDeadHolder({
      takeover: 'reconcile',
      reconcile: ({ attempt }) => {
        attempts.push(attempt);
        if (attempt === 1) throw new Error('ledger unreachable');
        return { state: 'not_done' };
      },
    });
    const refused = await t.retry(charge());
    expect(refused.status).toBe(503);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as { type: string }).type).toBe('urn:idem:problem:idempotency-reconcile-failed');
    expect((await t.store.get(recordPk('single-tenant', KEY)))?.status).toBe('in_progress');
    // Within the abandoned lease: in use. After it lapses: asked again, and this time the work runs.
    expect((await t.retry(charge())).status).toBe(409);
    t.clock.advance(LEASE);
    expect((await t.retry(charge())).status).toBe(201);
    expect([attempts, t.runs()]).toEqual([[1, 2], 1]);
  });

  it('a hook that does not answer within reconcileTimeoutMs: 503, its signal aborted, nothing runs', async () => {
    let signal: AbortSignal | undefined;
    const t = await afterDeadHolder({
      takeover: 'reconcile',
      reconcileTimeoutMs: 200,
      reconcile: (context) => {
        signal = context.signal;
        return new Promise(() => {});
      },
    });
    const pending = t.retry(charge());
    await waitFor('the hook was asked', () => signal !== undefined);
    expect(signal?.aborted).toBe(false);
    t.clock.advance(200);
    const refused = await pending;
    expect([refused.status, signal?.aborted, t.runs()]).toEqual([503, true, 0]);
    expect((await t.store.get(recordPk('single-tenant', KEY)))?.status).toBe('in_progress');
  });

  it('an answer that is not one of the three is a failed hook: 503, nothing runs', async () => {
    const t = await afterDeadHolder({
      takeover: 'reconcile',
      reconcile: () => ({ state: 'done' }) as never,
    });
    expect((await t.retry(charge())).status).toBe(503);
    expect(t.runs()).toBe(0);
  });

  it('a local route takes no policy but rerun: its work has no outside call to be unsure of', () => {
    expect(() =>
      idempotency({ store: memoryStore(), scope: 'single-tenant', local: true, takeover: 'quarantine' }),
    ).toThrow(/Expected `takeover` to be 'rerun' on a local route/);
  });

  it("takeover: 'reconcile' without a hook is refused at construction", () => {
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', takeover: 'reconcile' })).toThrow(
      /Expected `reconcile` to be a function/,
    );
    expect(() => idempotency({ store: memoryStore(), scope: 'single-tenant', takeover: 'retry' as never })).toThrow(
      /Expected `takeover` to be 'rerun', 'reconcile' or 'quarantine'/,
    );
  });
});

describe("takeover: 'quarantine'", () => {
  it('409 operation_state "unknown", exactly; the key keeps answering it, and the handler never runs', async () => {
    const t = await afterDeadHolder({ takeover: 'quarantine' });
    const refused = await t.retry(charge());
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    expect(refused.headers.get('retry-after')).toBe(null);
    expect(await refused.json()).toEqual({
      type: 'urn:idem:problem:idempotency-outcome-unknown',
      title: 'Outcome unknown',
      status: 409,
      detail:
        'An earlier attempt with this Idempotency-Key stopped before recording its outcome, which is unknown. ' +
        'It will not be run again; an operator resolves it (idem records resolve).',
      operation_state: 'unknown',
    });
    // Inside the quarantining lease: in use; after it, unknown again — on any instance with the policy.
    const inUse = await t.retry(charge());
    expect([inUse.status, ((await inUse.json()) as { type: string }).type]).toEqual([
      409,
      'urn:idem:problem:idempotency-key-in-use',
    ]);
    t.clock.advance(LEASE);
    const again = await t.retry(charge());
    expect([again.status, ((await again.json()) as { operation_state: string }).operation_state]).toEqual([
      409,
      'unknown',
    ]);
    const record = await t.store.get(recordPk('single-tenant', KEY));
    expect([record?.status, record?.id, t.runs(), t.effects.length]).toEqual(['in_progress', t.firstId(), 0, 1]);
  });

  it('a retryable failure is not a takeover: the next attempt runs the work', async () => {
    const store = memoryStore();
    let runs = 0;
    const handle = idempotency({ store, scope: 'single-tenant', takeover: 'quarantine' })(() => {
      runs++;
      return new Response('busy', { status: runs === 1 ? 503 : 201 });
    });
    expect((await handle(charge())).status).toBe(503);
    expect((await handle(charge())).status).toBe(201);
    expect(runs).toBe(2);
  });

  it("'rerun' (the default) runs the handler again after a dead holder: the double effect the policies prevent", async () => {
    const t = await afterDeadHolder({});
    expect((await t.retry(charge())).status).toBe(201);
    expect([t.effects.length + t.runs(), t.seen]).toEqual([2, [{ id: t.firstId(), reclaimed: true }]]);
  });
});
