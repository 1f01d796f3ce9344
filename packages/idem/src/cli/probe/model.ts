/**
 * @module The probe's vocabulary: the checks it runs, how a result is graded against the two profiles, the report,
 * and the options.
 */
export type CheckId =
  | 'first'
  | 'replay'
  | 'replay-marker'
  | 'key-order'
  | 'mismatch'
  | 'concurrent'
  | 'conflict'
  | 'missing-key'
  | 'malformed-key';

export const CHECK_IDS: readonly CheckId[] = [
  'first',
  'replay',
  'replay-marker',
  'key-order',
  'mismatch',
  'concurrent',
  'conflict',
  'missing-key',
  'malformed-key',
];

export const TITLES: Readonly<Record<CheckId, string>> = {
  first: 'first request runs once',
  replay: 'retry replays the first answer',
  'replay-marker': 'replay is marked',
  'key-order': 'JSON key order is the same request',
  mismatch: 'reused key, other payload: refused',
  concurrent: 'concurrent duplicates run once',
  conflict: 'concurrent duplicate gets 409',
  'missing-key': 'missing key',
  'malformed-key': 'malformed key',
};

/**
 * Said by every check that passes only on a count of executions, when there is none: the same answer twice proves
 * nothing of an API that answers every request alike (a constant body), so such a check warns, never passes.
 */
export const COUNT_HINT = 'pass --count-url to check executions';

/** `warn`: not what the check hoped for, but no request was executed twice or answered wrongly. Only `fail` fails the probe. */
export type CheckResult = 'pass' | 'fail' | 'warn' | 'skip';

/** How one profile grades a check: `ok: null` when the profile says nothing about it. */
export interface ProfileVerdict {
  readonly ok: boolean | null;
  readonly note: string;
}

export const DASH: ProfileVerdict = { ok: null, note: '' };
export const yes = (note = ''): ProfileVerdict => ({ ok: true, note });
export const no = (note: string): ProfileVerdict => ({ ok: false, note });
export const unsaid = (note = ''): ProfileVerdict => ({ ok: null, note });

export interface Check {
  readonly id: CheckId;
  readonly title: string;
  readonly result: CheckResult;
  /** draft-ietf-httpapi-idempotency-key-header. */
  readonly ietf: ProfileVerdict;
  /** Stripe's documented behaviour. */
  readonly stripe: ProfileVerdict;
  /** What was seen, in words. */
  readonly observed: string;
}

/** A check that judged nothing (skipped, or a request that failed): no verdict from either profile. */
export function unjudged(id: CheckId, result: CheckResult, observed: string): Check {
  return { id, title: TITLES[id], result, ietf: DASH, stripe: DASH, observed };
}

export interface ProbeReport {
  readonly url: string;
  readonly method: string;
  /** False when any check failed. */
  readonly ok: boolean;
  /**
   * How executions were counted: by `--count-url`, or `inferred` — not counted, only told apart by distinct response
   * bodies, which can show several executions but never prove one (the checks that need a count then warn).
   */
  readonly sideEffects: 'counted' | 'inferred';
  readonly body: string;
  readonly tamperedBody: string;
  readonly concurrency: number;
  readonly summary: Readonly<Record<CheckResult, number>>;
  readonly checks: readonly Check[];
}

export interface ProbeOptions {
  readonly url: string;
  /** Default `POST`. */
  readonly method?: string;
  /** Sent with every request, and with the count request (e.g. the API's `Authorization`). */
  readonly headers?: ReadonlyArray<readonly [string, string]>;
  /** The JSON payload. */
  readonly body: string;
  /** The payload for the reused-key check. Default: derived from `body` by changing one number (or string). */
  readonly tamperedBody?: string;
  /** A GET that returns the number of side effects (e.g. charges), as a bare number or JSON at `countPath`. */
  readonly countUrl?: string;
  /** A dotted path into the count URL's JSON, e.g. `count` or `data.total`. */
  readonly countPath?: string;
  /** Simultaneous duplicates in the concurrency check. Default 10. */
  readonly concurrency?: number;
  /** A header the API honours to hold the work (e.g. `Idem-Lab-Delay-Ms: 500`), sent with the duplicates. */
  readonly delayHeader?: readonly [string, string];
  /** Default `Idempotency-Key`. */
  readonly keyHeader?: string;
  /** Default `Idempotent-Replayed` (Stripe's). */
  readonly replayHeader?: string;
  /** Send keys as RFC 8941 sf-strings (`"…"`), as the IETF draft writes them. Default: bare, as Stripe does. */
  readonly sfString?: boolean;
  /** Per-request timeout. Default 30 s. */
  readonly timeoutMs?: number;
  /**
   * The most bytes read of one response body (and of the count URL's); past it the request fails and its
   * connection is dropped. Default {@link MAX_RESPONSE_BYTES}.
   */
  readonly maxResponseBytes?: number;
  readonly skip?: readonly CheckId[];
  /** Called as each check completes (the CLI prints progress to stderr). */
  readonly onCheck?: (check: Check) => void;
}

/** The default of {@link ProbeOptions.maxResponseBytes}: 4 MiB, far above any API's answer to a charge. */
export const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

/** One answer the server gave: its body read whole (at most `maxResponseBytes`). */
export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: Uint8Array;
}
