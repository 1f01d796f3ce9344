/**
 * @module The gate's claim on a key: the engine's decision for a keyed request as the gate answers it — a replay,
 * a refusal's problem, or the `Claim` the handler runs under, whose `complete` records the response.
 */
import type { Engine, OutcomeKind, RunRequest } from '../core/engine.js';
import { beginLocal } from '../core/local.js';
import type { StoredResponse } from '../core/record.js';
import type { Admission, Answer } from './middleware.js';
import type { Declaration, HandlerContext } from './options.js';
import { admitDeclaration } from './declaration.js';
import { BodyTooLargeError, replayResponse } from './replay.js';
import { responseSize, responseTooLarge, storedResponse } from './stored.js';

/** What a claim needs of its gate: fixed when the gate is built, one object for every request. */
export interface ClaimSettings<Tx, Req> {
  readonly engine: Engine<Tx>;
  /** A `local` route: the store claims the key inside the transaction it opens. */
  readonly local: boolean;
  /** The largest response a record holds: the smaller of `maxResponseBytes` and the store's own limit. */
  readonly responseLimit: number;
  readonly classify: ((status: number, request: Req) => OutcomeKind | undefined) | undefined;
  /** The gate's `answerFor`: the problem for an error. */
  readonly answerFor: (error: unknown, request: Req) => Response;
}

/** A replay's answer: the stored response, and the Web `Response` for it built on first read only. */
function replayAnswer(stored: StoredResponse): Answer {
  let built: Response | undefined;
  return {
    kind: 'answer',
    replay: stored,
    get response(): Response {
      return (built ??= replayResponse(stored));
    },
  };
}

/**
 * Claims the key: a replay or refusal is answered at once; a lease becomes a claim the caller's handler runs
 * under. On a `local` route the store claims the key inside the transaction it opens, and the handler runs with
 * `tx` until `complete` hands its response back into that transaction, which writes the record and commits.
 */
export async function claim<Tx, Req>(
  settings: ClaimSettings<Tx, Req>,
  request: RunRequest,
  body: Uint8Array,
  native: Req,
): Promise<Admission<Tx>> {
  const { engine, local, responseLimit, classify, answerFor } = settings;
  const decision = local ? await beginLocal(engine, request) : await engine.begin(request);
  if (decision.kind === 'replay') return replayAnswer(decision.response);
  if (decision.kind === 'refused') return { kind: 'answer', response: answerFor(decision.error, native) };
  const { lease } = decision;
  let declared: Declaration<Tx> = {};
  const context: HandlerContext<Tx> = {
    scope: lease.scope,
    key: lease.key,
    id: lease.id,
    reclaimed: lease.reclaimed,
    // Read now, an own property: a context is spread, copied and proxied by handlers, which a getter on a class
    // would not survive; and a getter on an object literal is built by the runtime, which costs more
    // (callgrind: 18k instructions a request) than the AbortController it would save.
    signal: lease.signal,
    protected: true,
    declare: (d) => (declared = { ...declared, ...admitDeclaration(engine.store, d) }),
  };
  return {
    kind: 'run',
    body,
    lease: 'tx' in lease ? null : lease,
    context: 'tx' in lease ? { ...context, tx: lease.tx } : context,
    async complete(response, outcome) {
      if (lease.settled) {
        // Settled already (by the adapter, or by the engine past maxHoldMs): any call returns that first
        // settlement and writes nothing. Its refusal is the answer: the handler's response is not what is recorded.
        const first = await lease.fail();
        return first.ok ? undefined : answerFor(first.error, native);
      }
      if (responseSize(response) > responseLimit) {
        // Final, so the work's declared writes commit with it: the work ran and will never run again.
        const stored = await responseTooLarge(new BodyTooLargeError(responseLimit));
        const settled = await lease.complete({ ...declared, response: stored, outcome: 'failed-final' });
        return settled.ok ? storedResponse(stored) : answerFor(settled.error, native);
      }
      // The adapter's own outcome (a too-large replacement) wins over what the handler declared for its response.
      const chosen = outcome ?? declared.outcome ?? classify?.(response.status, native);
      const settled = await lease.complete({
        response,
        ...declared,
        ...(chosen === undefined ? {} : { outcome: chosen }),
      });
      return settled.ok ? undefined : answerFor(settled.error, native);
    },
    async fail(answered = false) {
      await lease.fail({ answered });
    },
  };
}
