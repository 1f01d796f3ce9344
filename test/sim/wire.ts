/**
 * @module The store as a process sees it: every call travels to the store (a seeded latency), runs there against
 * the real store, and its reply travels back (another latency) — or is delayed, refused, lost on the way, as the
 * seed's faults say.
 */
import type { AnyStore } from './backend.js';
import { describe, type WriteInfo } from './checker.js';
import type { ScheduledStore } from './defects.js';
import { T0 } from './scenario.js';
import { current, type Attempt, type Incarnation, type Landed, type Sim } from './world.js';

/**
 * The store of one process incarnation, its calls scheduled on the simulated wire.
 *
 * @example
 * const store = scheduledStore(sim, incarnation, backend.storeFor())
 */
export function scheduledStore(sim: Sim, inc: Incarnation, lower: AnyStore): ScheduledStore {
  const op = <T>(name: string, pk: string, info: WriteInfo, detail: string, exec: () => Promise<T>) =>
    storeCall(sim, inc, name, pk, info, detail, exec);
  return {
    name: `sim(${lower.name})`,
    get roundTrips() {
      return lower.roundTrips;
    },
    claim: (r) =>
      op(
        'claim',
        r.pk,
        { now: r.now, token: r.token, fingerprint: r.fingerprint },
        `fp=${r.fingerprint.slice(0, 8)} now=${r.now - T0}`,
        () => lower.claim(r),
      ),
    complete: (r) => {
      const response = r.outcome.response ? ` ${r.outcome.response.status}` : '';
      return op(
        'complete',
        r.pk,
        { token: r.token, now: r.now },
        `→${r.outcome.status}${response} token=${r.token}`,
        () => lower.complete(r),
      );
    },
    renew: (r) =>
      op('renew', r.pk, { token: r.token, now: r.now }, `token=${r.token} now=${r.now - T0}`, () => lower.renew(r)),
    release: (r) => op('release', r.pk, { token: r.token }, `token=${r.token}`, () => lower.release(r)),
    get: (pk) => op('get', pk, {}, '', () => lower.get(pk)),
    sweep: (r) => lower.sweep(r),
    list: (r) => lower.list(r),
    close: () => lower.close(),
    raw: (name, pk, exec, now) => op(name, pk, { now }, '', exec),
  };
}

/** One leg of a round trip: usually a few ms, sometimes tens or hundreds. */
function latency(sim: Sim, attempt: Attempt | undefined): number {
  if (sim.scenario.exhaustive) return 0; // the driver orders what happens at one instant
  if (!attempt || attempt.settle) return 1; // a settling retry: fault-free, and on a quiet network
  const r = attempt.rng.next();
  return r < 0.8
    ? attempt.rng.int(0, 5)
    : r < 0.95
      ? attempt.rng.int(5, 100)
      : attempt.rng.int(100, Math.floor(sim.scenario.leaseMs / 2));
}

function storeCall<T>(
  sim: Sim,
  inc: Incarnation,
  name: string,
  pk: string,
  info: WriteInfo,
  detail: string,
  exec: () => Promise<T>,
): Promise<T> {
  const attempt = current.getStore();
  const by = attempt ? ` (${attempt.label})` : '';
  const renewal = attempt && name === 'renew' ? attempt.label : undefined;
  if (renewal) sim.time.renewalSent(renewal, sim.now);
  // A call that never answers: sent on a black-holed connection. A renewal stuck so never reaches the store; any
  // other call may, and take effect there, but its reply never comes back.
  if (inc.partitionedUntil > sim.now) {
    sim.log(() => `${inc.label} ${name} ${pk}${by} ✗ never answers (the process is cut off from the store)`);
    return new Promise<T>(() => undefined);
  }
  const hung = sim.fault(renewal ? 'renew-stall' : 'store-hang', attempt);
  if (hung !== undefined) {
    const lands = !renewal && (attempt as Attempt).rng.chance(0.5);
    sim.log(
      () =>
        `${inc.label} ${name} ${pk}${by} ✗ fault ${hung}: never answers` +
        (renewal ? ' (a renewal stuck on a dead connection)' : lands ? ' (it reaches the store)' : ''),
    );
    if (!lands) return new Promise<T>(() => undefined);
  }
  return new Promise<T>((resolve, reject) => {
    /** The reply travels back; a dead process never reads it, a frozen one reads it when it wakes. */
    const replyLater = (reply: () => void, ok: boolean | undefined): void => {
      if (!inc.alive || hung !== undefined) return;
      sim.at(
        Math.max(sim.now + latency(sim, attempt), inc.pausedUntil),
        inc,
        () => {
          if (renewal && inc.alive) sim.time.renewalAnswered(renewal, ok);
          reply();
        },
        undefined,
        `${name} ${pk} reply reaches ${inc.label}`,
      );
    };
    const arrive = (): (() => Promise<Landed | undefined>) => {
      const down = sim.fault('store-down', attempt);
      if (down !== undefined) {
        sim.log(() => `${inc.label} ${name} ${pk}${by} ✗ fault ${down}: the store is unreachable`);
        return async () => {
          replyLater(() => reject(new Error('sim: store unreachable')), undefined);
          return undefined;
        };
      }
      // Each observation reads the record when it is called (both backends read synchronously, and the promise
      // carries that moment's record): before the call, and right after its synchronous part.
      const writes = name !== 'get';
      const beforeRead = writes ? sim.backend.observe(pk) : undefined;
      let running: Promise<T>;
      try {
        running = exec();
      } catch (error) {
        running = Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
      const afterRead = writes ? sim.backend.observe(pk) : undefined;
      // The ledger rows this call's effects committed (read synchronously too: in a batch, the next call's
      // effects must not be charged to this one).
      const rows = name === 'complete' ? sim.backend.newLedgerRows() : [];
      return async () => {
        const before = (await beforeRead) ?? null;
        const after = afterRead === undefined ? undefined : await afterRead;
        let value: T | undefined;
        let error: unknown;
        let threw = false;
        try {
          value = await running;
        } catch (e) {
          error = e;
          threw = true;
        }
        const result = threw ? `threw ${String(error)}` : outcome(value);
        sim.log(() => `${inc.label} ${name} ${pk}${detail ? ` ${detail}` : ''}${by} → ${result}`);
        if (name === 'claim' && attempt && !threw && (value as { kind?: unknown }).kind === 'claimed')
          sim.time.claimGranted(attempt.label);
        if (after !== undefined) {
          sim.checker.onStoreOp(name, pk, info, before, after, value, threw);
          for (const row of rows) sim.checker.onLedgerRow(row, after);
        }
        const lost = threw ? undefined : sim.fault('store-reply-lost', attempt);
        if (lost !== undefined) sim.log(() => `    ✗ fault ${lost}: the reply is lost (the call took effect)`);
        const ok = threw || lost !== undefined ? undefined : (value as { ok?: unknown } | undefined)?.ok === true;
        replyLater(
          lost !== undefined
            ? () => reject(new Error('sim: store reply lost'))
            : threw
              ? () => reject(error instanceof Error ? error : new Error(String(error)))
              : () => resolve(value as T),
          name === 'renew' ? ok : undefined,
        );
        return { pk, after };
      };
    };
    const delayed = sim.fault('store-delay', attempt);
    const ms =
      delayed === undefined
        ? latency(sim, attempt)
        : sim.scenario.leaseMs + (sim.scenario.exhaustive ? 1 : (attempt as Attempt).rng.int(0, sim.scenario.leaseMs));
    if (delayed !== undefined)
      sim.log(() => `${inc.label} ${name} ${pk}${by} ✗ fault ${delayed}: ${ms} ms on the wire`);
    // On the wire: it reaches the store even if its sender dies.
    sim.at(sim.now + ms, undefined, () => {}, arrive, `${name} ${pk} from ${inc.label} reaches the store`);
  });
}

/** A store call's result, in one line. */
function outcome(value: unknown): string {
  if (value === undefined) return 'written';
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  if ('kind' in value && 'record' in value) return `${String(value.kind)}: ${describe(value.record as never)}`;
  if ('ok' in value) return value.ok ? 'ok' : 'refused';
  return describe(value as never);
}
