/**
 * @module The binding: what an HTTP adapter does around the engine — `begin`, the handler, `complete`, the steps
 * of `Engine.run` as the Web layer takes them — with the two ways an answer leaves its hands early: a timeout
 * middleware answers 503 while the handler runs on (Express's `connect-timeout`), and a client leaves while the
 * answer streams to it (the stream then ends, or waits for ever for a reader that is gone).
 */
import type { Lease, RunRequest, RunResult, StoredResponse, WorkResult } from 'idem';
import { bindingWiring } from './defects.js';
import type { ChargeHandler } from './handler.js';
import type { Attempt, Incarnation, Sim } from './world.js';

/** What goes wrong with one request at the binding, drawn when it arrives. */
export interface Mishap {
  /**
   * A timeout middleware answers 503 `afterMs` after the request arrived, unless the binding answered first; the
   * handler's first step is stuck until `stallMs` after the request arrived (past the middleware's answer).
   */
  readonly early?: { readonly id: string; readonly afterMs: number; readonly stallMs: number };
  /** The answer takes `streamMs` to send; its client leaves `leaveMs` into it; `stuck`: the stream never ends. */
  readonly gone?: { readonly id: string; readonly streamMs: number; readonly leaveMs: number; readonly stuck: boolean };
}

/** What the client hears from the binding, besides its final answer. */
export interface Listener {
  early(status: number): void;
  gone(): void;
}

const MIDDLEWARE_503: StoredResponse = {
  status: 503,
  headers: [['content-type', 'application/json']],
  body: new TextEncoder().encode('{"error":"request_timeout","by":"timeout middleware"}'),
};

/**
 * Serves one request through the binding. Resolves with the answer the binding sends, or undefined when the
 * answer already left (the middleware's 503) or its client is gone; rejects as `Engine.run` does.
 *
 * @example
 * const result = await serve(sim, incarnation, attempt, request, pk, handler, { early: { id: 'a3#0', afterMs: 900 } }, listener)
 */
export async function serve(
  sim: Sim,
  inc: Incarnation,
  attempt: Attempt,
  request: RunRequest,
  pk: string,
  handler: ChargeHandler,
  mishap: Mishap,
  listener: Listener,
): Promise<RunResult | undefined> {
  const wiring = bindingWiring(sim.scenario.defect);
  const label = attempt.label;
  /** The answer is out of the binding's hands: sent by the middleware, or its client gone. */
  let out = false;
  /** The lease, once the claim is granted: what the binding settles if the middleware answers meanwhile. */
  const granted: { lease?: Lease<unknown> } = {};
  const answeredEarly = (held: Lease<unknown>): void => {
    if (wiring.answeredEarly(held, MIDDLEWARE_503)) sim.time.settled(label);
  };
  let timer: unknown;
  if (mishap.early) {
    const { id, afterMs } = mishap.early;
    timer = inc.clock.setTimeout(() => {
      if (out) return;
      out = true;
      sim.log(() => `${inc.label} ✗ fault ${id}: a timeout middleware answers ${label} 503 after ${afterMs} ms`);
      listener.early(503);
      if (granted.lease) answeredEarly(granted.lease);
    }, afterMs);
  }
  /** The binding begins to send the answer itself: the middleware can no longer answer. */
  const send = (): void => inc.clock.clearTimeout(timer);
  const decision = await inc.engine.begin(request);
  if (decision.kind !== 'lease') send();
  if (decision.kind === 'refused') {
    if (out) return undefined;
    throw decision.error;
  }
  if (decision.kind === 'replay') {
    return out ? undefined : { replayed: true, response: decision.response, record: decision.record };
  }
  const lease = (granted.lease = decision.lease);
  // The middleware answered while the claim was on its way: the handler runs all the same (the chain goes on).
  if (out) answeredEarly(lease);
  let result: WorkResult<unknown>;
  try {
    result = await handler.run(inc, attempt, pk, lease, false);
  } catch (error) {
    send();
    // Settling stops the renewals at once, before the write.
    sim.time.settled(label);
    await lease.fail();
    if (out) return undefined;
    throw error;
  }
  send();
  if (mishap.gone && !out) {
    await stream(sim, inc, label, mishap.gone, () => {
      out = true;
      listener.gone();
      if (wiring.clientGone(lease)) sim.time.settled(label);
    });
  }
  sim.time.settled(label);
  const settled = await lease.complete(result);
  if (out) return undefined;
  if (!settled.ok) throw settled.error;
  return { replayed: false, response: result.response, record: settled.record };
}

/** The answer streams to a client that leaves part way; the stream then ends, or never does. */
async function stream(
  sim: Sim,
  inc: Incarnation,
  label: string,
  { id, streamMs, leaveMs, stuck }: NonNullable<Mishap['gone']>,
  gone: () => void,
): Promise<void> {
  sim.time.streaming(label, sim.now);
  await new Promise<void>((resolve) => {
    inc.clock.setTimeout(() => {
      sim.log(
        () =>
          `${inc.label} ✗ fault ${id}: the client of ${label} leaves ${leaveMs} ms into a ${streamMs} ms answer` +
          (stuck ? '; the stream never ends' : ''),
      );
      gone();
      if (!stuck) inc.clock.setTimeout(resolve, streamMs - leaveMs);
    }, leaveMs);
  });
}
