/**
 * @module `idempotent(fn, options)` — any async function, run once per key: the first result (JSON) is returned
 * to every repeat. For queue consumers, webhooks and serverless handlers, on the same engine as HTTP.
 */
import { createEngine, type Engine, type EngineOptions, type Lease, type WorkContext } from './engine.js';
import { configError, IdempotencyError } from './errors.js';
import { fingerprintSoon } from './fingerprint.js';
import type { StoredResponse } from './record.js';
import type { ReconcileContext, ReconcileHook } from './takeover.js';

/** What the function sees besides its input: the record's stable `id` (pass it downstream) and the lease `signal`. */
export type IdempotentContext = WorkContext;

/**
 * What `idempotent()`'s `reconcile` hook answers: the result every call gets (`succeeded`), the error every call
 * throws as an {@link IdempotentFailure} (`failed`: its name and message), or `not_done` (the function runs now).
 */
export type IdempotentReconcileAnswer<Out = unknown> =
  | { readonly state: 'succeeded'; readonly response: Out }
  | { readonly state: 'failed'; readonly response: unknown }
  | { readonly state: 'not_done' };

export interface IdempotentOptions<In, Tx = never, Out = unknown> extends Omit<EngineOptions<Tx>, 'reconcile'> {
  /**
   * With `takeover: 'reconcile'`: asked, when a call takes over a lapsed lease, what happened to the dead call's
   * `id`. A throw or `reconcileTimeoutMs` throws `RECONCILE_FAILED` and the function does not run.
   */
  readonly reconcile?: (
    context: ReconcileContext,
  ) => IdempotentReconcileAnswer<Out> | Promise<IdempotentReconcileAnswer<Out>>;
  /** The operation's key: a message id, or a business key (`order.id`). Must be a non-empty string. */
  readonly key: (input: In) => string;
  /** The tenant, or `'single-tenant'`. Two scopes never share a key. */
  readonly scope: string | ((input: In) => string);
  /**
   * What must be equal for a repeat to be the same operation. Default: the whole input, as canonical JSON. A
   * repeat whose payload differs throws `FINGERPRINT_MISMATCH`.
   */
  readonly payload?: (input: In) => unknown;
  /** This call's record lifetime, in ms (more than `leaseMs`). Default `ttlMs`. */
  readonly ttlFor?: (input: In) => number | undefined;
  /**
   * Whether a thrown error is final (recorded, and thrown again to every repeat as an {@link IdempotentFailure})
   * or retryable (the next delivery runs the function again). Default: retryable.
   */
  readonly isFinal?: (error: unknown) => boolean;
}

/** A final failure, recorded by the first call and thrown to every repeat: `name` and `message` are the original's. */
export class IdempotentFailure extends Error {
  override readonly name = 'IdempotentFailure';
  /** The original error's name. */
  readonly originalName: string;
  constructor(originalName: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.originalName = originalName;
  }
}

/** A function protected by {@link idempotent}, and the engine it runs on. */
export interface IdempotentFunction<In, Out> {
  (input: In): Promise<Out>;
  readonly engine: Engine<unknown>;
}

const JSON_HEADERS: ReadonlyArray<readonly [string, string]> = [['content-type', 'application/json']];
/** How a result and a final failure are told apart in the record: the status of the stored response. */
const RESULT_STATUS = 200;
const FAILURE_STATUS = 422;

/**
 * Protects `fn` so it runs at most once per key while the record lives; every repeat gets the first result back
 * (through JSON: return plain data). Same engine as HTTP: a claim before the work, a renewed lease, fencing, a
 * stable `id` across takeovers. A repeat while the first call runs throws `IN_FLIGHT` (`retryAfterMs` says
 * when to look again; with `waitForOutcomeMs` it waits for the result instead); a store that cannot be reached
 * throws `STORE_UNAVAILABLE` and `fn` does not run. Both mean: do not acknowledge the message, let it come back.
 *
 * @example
 * const post = idempotent(async (message: Payout, { id }) => bank.payout({ ...message, idempotencyKey: id }), {
 *   store, scope: 'single-tenant', key: (message) => message.payoutId,
 * })
 * await post(message) // a redelivery returns the first result; the payout happened once
 */
export function idempotent<In, Out, Tx = never>(
  fn: (input: In, context: IdempotentContext) => Promise<Out>,
  {
    key,
    scope,
    payload = (input) => input,
    ttlFor,
    isFinal = () => false,
    reconcile,
    ...engineOptions
  }: IdempotentOptions<In, Tx, Out>,
): IdempotentFunction<In, Out> {
  if (typeof fn !== 'function') throw configError('fn', 'an async function');
  if (typeof key !== 'function') throw configError('key', 'a function (input) => string', key);
  if (typeof scope !== 'string' && typeof scope !== 'function')
    throw configError('scope', 'a string or a function (input) => string', scope);
  if (typeof scope === 'string' && scope === '') throw configError('scope', 'a non-empty string', scope);
  const engine = createEngine({
    ...engineOptions,
    ...(reconcile === undefined ? {} : { reconcile: stores(reconcile) }),
  });
  const maxResultBytes = Math.min(1_048_576, engine.store.maxResponseBytes ?? Infinity);

  const call = async (input: In): Promise<Out> => {
    const id = key(input);
    if (typeof id !== 'string' || id === '')
      throw new IdempotencyError('KEY_MISSING', '`key(input)` must return a non-empty string.');
    const tenant = typeof scope === 'string' ? scope : scope(input);
    if (typeof tenant !== 'string' || tenant === '')
      throw new TypeError('`scope(input)` must return a non-empty string.');
    const body = encode(payload(input) ?? null);
    const ttlMs = ttlFor?.(input);
    const soon = fingerprintSoon({ method: 'CALL', path: '', contentType: 'application/json', body });
    const decision = await engine.begin({
      scope: tenant,
      key: id,
      fingerprint: typeof soon === 'string' ? soon : await soon,
      ...(ttlMs === undefined ? {} : { ttlMs }),
    });
    if (decision.kind === 'refused') throw decision.error;
    if (decision.kind === 'replay') return decode<Out>(decision.response);
    const { lease } = decision;
    try {
      let result: Out;
      try {
        result = await fn(input, lease);
      } catch (error) {
        if (!finalError(error)) {
          await lease.fail();
          throw error;
        }
        const failure = describeError(error);
        await record(lease, FAILURE_STATUS, failure, 'failed-final');
        throw new IdempotentFailure(failure.name, failure.message, { cause: error });
      }
      // The work ran: whatever its result, it must not run again. A result that cannot be stored (not JSON, or over
      // the store's limit) is recorded as a final failure, thrown now and to every repeat.
      let response: StoredResponse;
      try {
        response = stored(RESULT_STATUS, result ?? null);
        if (response.body.byteLength > maxResultBytes) {
          throw new RangeError(
            `idempotent: the result is ${response.body.byteLength} bytes, over the ${maxResultBytes} the store can keep.`,
          );
        }
      } catch (error) {
        const failure = describeError(error);
        await record(lease, FAILURE_STATUS, failure, 'failed-final');
        throw new IdempotentFailure(failure.name, failure.message, { cause: error });
      }
      await record(lease, RESULT_STATUS, response, 'succeeded');
      return decode<Out>(response);
    } finally {
      // Every path settles the lease (a throw from anywhere above must not leave it renewing).
      if (!lease.settled) await lease.fail();
    }
  };
  /** `isFinal`, where a throwing `isFinal` means retryable. */
  const finalError = (error: unknown): boolean => {
    try {
      return isFinal(error) === true;
    } catch {
      return false;
    }
  };
  return Object.assign(call, { engine: engine });
}

/** A `reconcile` hook answering with values, as one answering with the responses `idempotent()` records. */
function stores<Out>(reconcile: NonNullable<IdempotentOptions<never, never, Out>['reconcile']>): ReconcileHook {
  if (typeof reconcile !== 'function') return reconcile;
  return async (context) => {
    const answer = await reconcile(context);
    if (answer?.state === 'succeeded')
      return { state: 'succeeded', response: stored(RESULT_STATUS, answer.response ?? null) };
    if (answer?.state === 'failed')
      return { state: 'failed', response: stored(FAILURE_STATUS, describeError(answer.response)) };
    return answer;
  };
}

/** Records an outcome under the lease; a write that fails or is refused is thrown (LEASE_LOST, STORE_UNAVAILABLE). */
async function record<Tx>(
  lease: Lease<Tx>,
  status: number,
  value: unknown,
  outcome: 'succeeded' | 'failed-final',
): Promise<void> {
  const response = isStored(value) ? value : stored(status, value);
  const settled = await lease.complete({ response, outcome });
  if (!settled.ok) throw settled.error;
}

function isStored(value: unknown): value is StoredResponse {
  return typeof value === 'object' && value !== null && 'body' in value && value.body instanceof Uint8Array;
}

/** An error's name and message as plain strings, whatever was thrown. */
function describeError(error: unknown): { name: string; message: string } {
  try {
    if (error instanceof Error) return { name: String(error.name), message: String(error.message) };
    return { name: 'Error', message: String(error) };
  } catch {
    return { name: 'Error', message: 'an error that cannot be printed' };
  }
}

function encode(value: unknown): Uint8Array {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError('idempotent: the value is not JSON-serialisable.');
  return new TextEncoder().encode(text);
}

function stored(status: number, value: unknown): StoredResponse {
  return { status, headers: JSON_HEADERS, body: encode(value) };
}

/**
 * The first call's result as every call returns it, through JSON (so the first caller sees what repeats see). A
 * record this function did not write (`idem records resolve`) is read by its status: 4xx/5xx is a failure (a
 * `{ name, message }` body names it), 2xx/3xx a result whose body must be JSON; anything else fails, saying so.
 */
function decode<Out>(response: StoredResponse): Out {
  const text = new TextDecoder().decode(response.body);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (response.status >= 400) {
    const { name, message } = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
    if (typeof name === 'string' && typeof message === 'string') throw new IdempotentFailure(name, message);
    throw new IdempotentFailure('Error', `recorded as failed (${response.status}) by an operator: ${text}`);
  }
  if (value === undefined)
    throw new IdempotentFailure(
      'Error',
      `the record holds a ${response.status} whose body is not JSON (${response.body.byteLength} bytes), so no result can be returned; resolve it with --body '<the result as JSON>'`,
    );
  return value as Out;
}
