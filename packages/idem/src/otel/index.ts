/**
 * @module `idem/otel` — OpenTelemetry spans for every store call the engine makes (claim, completion, renewal,
 * release, read), with the decision, the store and its exact round trips; and the request's own span annotated
 * with what Idem decided. Never a key in clear (its hash) and never a body.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import {
  context,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type { IdempotencyEvent } from '../core/engine.js';
import type { IdempotencyRecord, IdempotencyStore, RoundTrip } from '../core/record.js';

export interface IdemTracingOptions {
  /** Where spans go. Default `trace.getTracer('idem')` (the global tracer provider). */
  readonly tracer?: Tracer;
  /**
   * What stands for a key in attributes. Default {@link keyHash}: the first 16 hex digits of its SHA-256, the
   * same as the demo's logs and `idem records list`. Keys with little entropy (an order number) can be guessed
   * back from a plain hash: pass an HMAC with a secret of yours instead.
   */
  readonly hashKey?: (key: string) => string;
}

/** The store operations the engine calls, traced as `idem.<op>`. */
export type TracedOp = 'claim' | 'complete' | 'renew' | 'release' | 'get';

/** What a claim span's `idem.decision` says the claim found. */
export type ClaimDecision = 'claimed' | 'reclaimed' | 'replayed' | 'in_flight' | 'mismatch';

export interface IdemTracing {
  /**
   * The store with every engine call wrapped in a span (`sweep`, `list` and `close` pass through). The result is
   * the same store otherwise: its own members (`migrate()`, `database`, `pool`…) are there too.
   */
  store<S extends IdempotencyStore<unknown>>(store: S): S;
  /** Pass it as the store's `onRoundTrip` option: each span then counts its own round trips exactly (`idem.round_trips`). */
  readonly onRoundTrip: (trip: RoundTrip) => void;
  /**
   * Pass it as `onEvent` (or call it from yours): sets `idem.decision` (and `idem.outcome`, `idem.record_id`,
   * `idem.refused_reason`) on the active span, e.g. your HTTP server span, and adds `idem.takeover`,
   * `idem.lease_lost` and `idem.stale_write_refused` span events. Never throws.
   */
  readonly onEvent: (event: IdempotencyEvent) => void;
}

/**
 * The first 16 hex digits of the key's SHA-256: enough to find one key's spans and log lines, not the key.
 *
 * @example
 * keyHash('8e03978e-40d5-43e8-bc93-6894a57f9324') // → 16 hex digits, as `printf %s "$KEY" | sha256sum | cut -c1-16`
 */
export function keyHash(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 16);
}

/**
 * Creates the tracing. Wrap the store with `tracing.store(...)`, give the store `onRoundTrip: tracing.onRoundTrip`
 * and the layer `onEvent: tracing.onEvent`.
 *
 * Spans (kind `INTERNAL`; a driver's own instrumentation nests under them), one per store call:
 *
 * | span | attributes |
 * |---|---|
 * | every one | `idem.store` (the store's name), `idem.scope`, `idem.key_hash`, `idem.round_trips` (with `onRoundTrip`) |
 * | `idem.claim` | `idem.decision` (`claimed`, `reclaimed`, `replayed`, `in_flight`, `mismatch`), `idem.record_id` |
 * | `idem.complete` | `idem.outcome` (`succeeded`, `failed-final`, `failed-retryable`), `idem.response_status`, `idem.effects`, `idem.written` |
 * | `idem.renew`, `idem.release` | `idem.written` (false: the lease was lost, the write refused) |
 * | `idem.get` | `idem.found`, `idem.record_status` |
 *
 * A store that fails sets the span's status to `ERROR` with the error's name and code only (a driver's message
 * may quote the statement's parameters, the key among them), and `error.type`.
 *
 * @example
 * const tracing = idemTracing({ tracer: trace.getTracer('payments') })
 * const store = tracing.store(sqliteStore({ database, onRoundTrip: tracing.onRoundTrip }))
 * const protect = idempotency({ store, scope, onEvent: tracing.onEvent })
 */
export function idemTracing({
  tracer = trace.getTracer('idem'),
  hashKey = keyHash,
}: IdemTracingOptions = {}): IdemTracing {
  const meters = new AsyncLocalStorage<{ trips: number }>();
  let metered = false;

  const onRoundTrip = (_trip: RoundTrip): void => {
    metered = true;
    const meter = meters.getStore();
    if (meter) meter.trips++;
  };

  /**
   * Runs one store call in its span, the span active (so a driver's spans nest under it) and metered. Telemetry
   * must never change what happens to a payment: a tracer, span or key hash that throws costs the span, never
   * the call, which runs exactly once whatever the tracing does.
   */
  async function traced<T>(
    op: TracedOp,
    name: string,
    about: () => Attributes,
    call: () => Promise<T>,
    describe: (value: T) => Attributes,
  ): Promise<T> {
    const meter = { trips: 0 };
    let span: Span | undefined;
    let active: Context | undefined;
    try {
      span = tracer.startSpan(`idem.${op}`, {
        kind: SpanKind.INTERNAL,
        attributes: { 'idem.store': name, ...about() },
      });
      active = trace.setSpan(context.active(), span);
    } catch {
      // no span, or no way to make it active: the call runs without
    }
    let called = false;
    const run = (): Promise<T> => {
      called = true;
      return meters.run(meter, call);
    };
    let pending: Promise<T>;
    if (active === undefined) {
      pending = run();
    } else {
      try {
        pending = context.with(active, run);
      } catch (error) {
        // A context manager that threw before the call ran: the call runs, outside the span.
        if (called) throw error;
        pending = run();
      }
    }
    try {
      const value = await pending;
      safely(() => span?.setAttributes(describe(value)));
      return value;
    } catch (error) {
      safely(() => span && failed(span, error));
      throw error;
    } finally {
      safely(() => {
        if (!span) return;
        if (metered) span.setAttribute('idem.round_trips', meter.trips);
        span.end();
      });
    }
  }

  const subject = (scope: string, key: string): Attributes => ({ 'idem.scope': scope, 'idem.key_hash': hashKey(key) });
  /** The scope and key hash of a record's `pk` (`IDEMPOTENCY#<scope, % and # escaped>#<key>`). */
  const fromPk = (pk: string): Attributes => {
    const second = pk.indexOf('#', pk.indexOf('#') + 1);
    if (!pk.startsWith('IDEMPOTENCY#') || second === -1) return {};
    const scope = pk
      .slice('IDEMPOTENCY#'.length, second)
      .replace(/%2[35]/g, (escape) => (escape === '%23' ? '#' : '%'));
    return subject(scope, pk.slice(second + 1));
  };

  const wrap = <S extends IdempotencyStore<unknown>>(store: S): S => tracedStore(store, traced, subject, fromPk);

  const onEvent = (event: IdempotencyEvent): void => safely(() => annotate(event, subject));

  return { store: wrap, onRoundTrip, onEvent };
}

/** `idemTracing`'s `traced`: one store call in its span (see there). */
type Traced = <T>(
  op: TracedOp,
  name: string,
  about: () => Attributes,
  call: () => Promise<T>,
  describe: (value: T) => Attributes,
) => Promise<T>;

/** The store with its traced calls in spans; its other members reached on the store itself. */
function tracedStore<S extends IdempotencyStore<unknown>>(
  store: S,
  traced: Traced,
  subject: (scope: string, key: string) => Attributes,
  fromPk: (pk: string) => Attributes,
): S {
  const inner: IdempotencyStore<unknown> = store;
  const name = inner.name;
  const written = (result: { ok: boolean }): Attributes => ({ 'idem.written': result.ok });
  /** A write named by the record's `pk` alone, its span saying whether it wrote: renew and release. */
  const fenced =
    <R extends { readonly pk: string }, T extends { ok: boolean }>(op: TracedOp, call: (request: R) => Promise<T>) =>
    (request: R) =>
      traced(
        op,
        name,
        () => fromPk(request.pk),
        () => call(request),
        written,
      );
  const calls: Pick<IdempotencyStore<unknown>, TracedOp> = {
    claim: (request) =>
      traced(
        'claim',
        name,
        () => subject(request.scope, request.key),
        () => inner.claim(request),
        (result) => ({
          'idem.decision': claimDecision(result.kind, result.record, request.id, request.fingerprint, request.now),
          'idem.record_id': result.record.id,
        }),
      ),
    complete: (request) =>
      traced(
        'complete',
        name,
        () => ({
          ...fromPk(request.pk),
          'idem.outcome':
            request.outcome.status === 'succeeded'
              ? 'succeeded'
              : request.outcome.retryable
                ? 'failed-retryable'
                : 'failed-final',
          'idem.effects': request.effects !== undefined,
          ...(request.outcome.response ? { 'idem.response_status': request.outcome.response.status } : {}),
        }),
        () => inner.complete(request),
        written,
      ),
    renew: fenced('renew', (request) => inner.renew(request)),
    release: fenced('release', (request) => inner.release(request)),
    get: (pk) =>
      traced(
        'get',
        name,
        () => fromPk(pk),
        () => inner.get(pk),
        (record) => ({
          'idem.found': record !== null,
          ...(record ? { 'idem.record_status': record.status } : {}),
        }),
      ),
  };
  // The store's own members stay reachable, called on the store itself (its #private fields need it).
  return new Proxy(store, {
    get(target, property) {
      if (Object.hasOwn(calls, property)) return calls[property as TracedOp];
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Marks the active span (the caller's request span) with what the engine decided: attributes, or an event. */
function annotate(event: IdempotencyEvent, subject: (scope: string, key: string) => Attributes): void {
  const span = trace.getActiveSpan();
  if (!span?.isRecording()) return;
  if (event.type === 'store_op') return;
  if (event.type === 'refused') {
    span.setAttributes({ 'idem.decision': 'refused', 'idem.refused_reason': event.reason });
    return;
  }
  const about: Attributes = {
    ...subject(event.scope, event.key),
    ...(event.id === undefined ? {} : { 'idem.record_id': event.id }),
  };
  switch (event.type) {
    case 'executed':
      span.setAttributes({ ...about, 'idem.decision': 'executed', 'idem.outcome': event.outcome });
      return;
    case 'replayed':
    case 'in_flight':
    case 'mismatch':
      span.setAttributes({ ...about, 'idem.decision': event.type });
      return;
    case 'takeover':
    case 'lease_lost':
      span.addEvent(`idem.${event.type}`, about);
      return;
    case 'stale_write_refused':
      span.addEvent('idem.stale_write_refused', { ...about, 'idem.op': event.op });
      return;
  }
}

/** What the claim found, by the same rules the engine answers with (docs/DESIGN.md: State machine). */
function claimDecision(
  kind: 'claimed' | 'existing',
  record: IdempotencyRecord,
  freshId: string,
  fingerprint: string,
  now: number,
): ClaimDecision {
  if (kind === 'claimed') return record.id === freshId ? 'claimed' : 'reclaimed';
  if (record.fingerprint !== fingerprint) return 'mismatch';
  if (record.status === 'in_progress' && record.leaseExpiresAt > now) return 'in_flight';
  return 'replayed';
}

/** A failed call: the error's name and code only, never its message (a driver may quote the key in it). */
function failed(span: Span, error: unknown): void {
  const name = error instanceof Error ? error.name : typeof error;
  const code = (error as { code?: unknown } | null)?.code;
  const type = typeof code === 'string' || typeof code === 'number' ? String(code) : name;
  span.setAttribute('error.type', type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type === name ? name : `${name} ${type}` });
}

/** Telemetry must never change what happens to a payment. */
function safely(fn: () => void): void {
  try {
    fn();
  } catch {
    // ignored
  }
}
