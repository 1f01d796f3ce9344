/**
 * @module For the Koa adapter's tests (not part of the library): an app guarded on a memory store, the key's
 * record, counted work, a server that `afterEach` closes, and a timeout middleware of the kind Koa apps write.
 */
import Koa, { type Middleware, type ParameterizedContext } from 'koa';
import { onTestFinished } from 'vitest';
import { Work } from '../../../../../test/work.js';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { postCharge, type Answer } from '../../testing/adapter-cases/answers.js';
import { serveNode } from '../../testing/adapter.js';
import { idempotency, type IdempotencyState } from './index.js';

/** A Koa app (silent: the errors it answers are the cases'), its guard on a memory store, the record, the work. */
export function setup(leaseMs: number, maxHoldMs?: number) {
  const store = memoryStore();
  const limits = maxHoldMs === undefined ? { leaseMs } : { leaseMs, maxHoldMs };
  const guard = idempotency({ store, scope: 'single-tenant', ttlMs: 86_400_000, onError: () => {}, ...limits });
  const app = new Koa<IdempotencyState>();
  app.silent = true;
  const record = async (key = 'k1') => store.get(recordPk('single-tenant', key));
  return { app, guard, record, work: new Work() };
}

type KoaContext = ParameterizedContext<IdempotencyState>;

/** The handler: one execution of `work` (waiting at its gate), then `answer(ctx, n)` for the `n`th. */
export function afterWork(work: Work, answer: (ctx: KoaContext, n: number) => void): Middleware<IdempotencyState> {
  return async (ctx) => answer(ctx, await work.run(ctx.state.idempotency));
}

/** A 201 with the execution's number: `{"run":n}`. */
export const created = (ctx: KoaContext, n: number): void => {
  ctx.status = 201;
  ctx.body = { run: n };
};

/** Serves the app; `send(key)` posts a charge to /v1/charges with the key and answers its status and text. */
export async function listen(app: Koa<IdempotencyState>) {
  const served = await serveNode(app.callback());
  onTestFinished(() => served.close());
  return async (key = 'k1', signal?: AbortSignal): Promise<Pick<Answer, 'status' | 'text'>> => {
    const { status, text } = await postCharge(served.url, { key, ref: 'ref_1', ...(signal ? { signal } : {}) });
    return { status, text };
  };
}

/** A timeout as Koa apps write one: `next()` raced with a timer that throws `ctx.throw(503)`; the handler goes on. */
export function timeout(ms: number, onTime: () => void = () => {}): Middleware {
  return async (ctx, next) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        onTime();
        try {
          ctx.throw(503);
        } catch (error) {
          reject(error instanceof Error ? error : new Error(String(error)));
        }
      }, ms);
    });
    try {
      await Promise.race([next(), late]);
    } finally {
      clearTimeout(timer);
    }
  };
}
