/**
 * @module The payments API (docs/DESIGN.md: Payments demo) as a Web-standard handler: `(Request) => Promise<Response>`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type IdempotencyEvent, type IdempotencyRecord, type IdempotencyStore } from 'idem';
import { BodyTooLargeError, problem } from 'idem/http';
import { chargeRoute, json } from './charge-route.js';
import { labFaults, labJournal, type LabJournal } from './lab-journal.js';
import { type Charge, type Ledger } from './ledger.js';
import { stripeProblem, withStripeError } from './stripe-error.js';

export { MAX_BODY_BYTES, MAX_LAB_DELAY_MS } from './charge-route.js';

/** In lab mode, any `sk_lab_<id>` key is its own sandbox account `acct_lab_<id>`: the lab page makes one per session. */
const LAB_KEY = /^sk_lab_([a-z0-9]{8,32})$/;

export interface AppOptions {
  /** The records store. When `sharedLedger` is true it is SQLite and `effects` receive its database. */
  readonly store: IdempotencyStore<never> | IdempotencyStore<unknown>;
  readonly ledger: Ledger;
  /**
   * True when the ledger lives in the store's own database: the charge is written in the same transaction as
   * the record's completion. False: the charge is written by the work itself, unique on the record's id.
   */
  readonly sharedLedger: boolean;
  readonly apiKeys: ReadonlyMap<string, string>;
  readonly lab: boolean;
  readonly ttlMs: number;
  readonly leaseMs: number;
  /** The engine's `cacheSize`: finished records kept in process. Default 0 (off). */
  readonly cacheSize?: number;
  readonly mismatchStatus: 400 | 422;
  readonly onEvent?: (event: IdempotencyEvent) => void;
  /** Lab only: the engine's clock runs this many ms ahead (negative: behind) of the wall clock. Ignored unless `lab`. */
  readonly clockSkewMs?: number;
  /** Static pages (the lab), by path. */
  readonly pages?: (request: Request) => Promise<Response | undefined>;
  /** The model page's routes under `/v1/model` (demo/model.ts), for an authenticated account. Lab mode only. */
  readonly model?: (request: Request, account: string) => Promise<Response | undefined>;
}

/**
 * What the bridge does with a request, decided from its line and headers before a byte of its body is read:
 * answer it at once with this response (the body is never read), read the body (`'body'`), or call the app
 * without it (`'no-body'`: the route reads none).
 */
export type Admission = Response | 'body' | 'no-body';

export interface App {
  (request: Request): Promise<Response>;
  /**
   * True when the node bridge must drop the connection without answering (lab only): after the work committed
   * (`Idem-Lab-Fault: drop-after-commit`), or as a crashed attempt would (`Idem-Lab-Fault: crash`). A sandbox
   * request whose work did not run (a replay, a 409, a refusal) is answered.
   */
  dropsAfterCommit(request: Request): boolean;
  /**
   * Lab mode, once the server holds its port: marks the requests a stopped process left running as interrupted.
   * Lab charges and history reads wait for it, so nothing runs on a key before its past is settled.
   */
  recover?(after?: Promise<unknown>): Promise<number>;
  /**
   * Called with the request's head (no body) before the body is read: a caller without a valid API key gets its
   * 401 here, so an anonymous sender never makes the server buffer a body.
   */
  admit(head: Request): Admission;
}

const invalid = (param: string, detail: string): Response =>
  problem({ status: 400, slug: 'parameter-invalid', title: 'Invalid parameter', detail, extensions: { param } });

/**
 * Builds the payments API.
 *
 * @example
 * const app = createApp({ store, ledger, sharedLedger: true, apiKeys, lab: false, ttlMs, leaseMs, mismatchStatus: 400 })
 * const response = await app(new Request('http://127.0.0.1:4000/v1/balance', { headers: { authorization: 'Bearer sk_test_alice' } }))
 */
export function createApp(options: AppOptions): App {
  const { store, ledger, apiKeys, lab } = options;

  const accountOf = (request: Request): string | undefined => {
    const match = /^Bearer (\S+)$/.exec(request.headers.get('authorization') ?? '');
    if (!match?.[1]) return undefined;
    const known = apiKeys.get(match[1]);
    if (known) return known;
    const sandbox = lab ? LAB_KEY.exec(match[1]) : null;
    return sandbox ? `acct_lab_${sandbox[1] as string}` : undefined;
  };

  /** Lab mode: each sandbox account's requests, read back after each one (lab-journal.ts). */
  const journal = lab ? labJournal(store, ledger) : undefined;
  /** Sandbox requests whose work did not run: the fault headers do not cut their answers. */
  const answered = new WeakSet<Request>();
  /** The start-up's marking of interrupted requests: lab charges and history reads wait for it. */
  let recovered: Promise<unknown> = Promise.resolve();
  const charges = chargeRoute({ options, accountOf, journal, answered, recovered: () => recovered });

  /** Every `/v1/` route needs an account; only its non-GET methods read a body. The pages and `/healthz` read none. */
  const admit = (head: Request): Admission => {
    if (!new URL(head.url).pathname.startsWith('/v1/')) return 'no-body';
    if (!accountOf(head)) return unauthorized();
    return head.method === 'GET' || head.method === 'HEAD' ? 'no-body' : 'body';
  };

  async function route(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname;
    if (path === '/healthz')
      return request.method === 'GET' ? json({ status: 'ok', store: store.name }) : notAllowed('GET');
    if (!path.startsWith('/v1/')) return (await options.pages?.(request)) ?? notFound(path);

    const account = accountOf(request);
    if (!account) return unauthorized();

    if (path === '/v1/charges') {
      if (request.method === 'GET') {
        const limit = url.searchParams.get('limit') ?? '10';
        if (!/^\d+$/.test(limit) || Number(limit) < 1 || Number(limit) > 100) {
          return invalid('limit', '`limit` must be an integer from 1 to 100.');
        }
        return json({ object: 'list', data: await ledger.list(account, Number(limit)) });
      }
      if (request.method !== 'POST') return notAllowed('GET, POST');
      return charges.post(request, account);
    }
    const one = /^\/v1\/charges\/([^/]+)$/.exec(path);
    if (one) {
      if (request.method !== 'GET') return notAllowed('GET');
      const id = decodeId(one[1] as string);
      const charge = id === undefined ? undefined : await ledger.get(account, id);
      return charge ? json(charge) : notFound(path);
    }
    if (path === '/v1/balance') {
      if (request.method !== 'GET') return notAllowed('GET');
      return json({ object: 'balance', ...(await ledger.balance(account)) });
    }
    if (path === '/v1/idempotency_records') {
      if (request.method !== 'GET') return notAllowed('GET');
      const records = await store.list({ scope: account, limit: 100 });
      return json({ object: 'list', data: records.map(publicRecord) });
    }
    if (lab && options.model && (path === '/v1/model' || path.startsWith('/v1/model/'))) {
      const answer = await options.model(request, account);
      if (answer) return answer;
    }
    if (path === '/v1/lab/history' && journal) {
      if (request.method !== 'GET') return notAllowed('GET');
      await recovered;
      return json({ object: 'lab_history', ...(await journal.history(account)) });
    }
    if (path === '/v1/lab/reset' && lab) {
      if (request.method !== 'POST') return notAllowed('POST');
      // A running request's last history write would find its row gone: the journal refuses Reset meanwhile.
      const deleted = journal ? await journal.reset(account, () => ledger.clear(account)) : await ledger.clear(account);
      if (deleted instanceof Response) return deleted;
      return json({ object: 'lab_reset', deleted_charges: deleted });
    }
    return notFound(path);
  }

  const answer = async (request: Request): Promise<Response> => {
    try {
      return await route(request);
    } catch (error) {
      if (error instanceof BodyTooLargeError) {
        return problem({
          status: 413,
          slug: 'request-too-large',
          title: 'Request body too large',
          detail: error.message,
        });
      }
      console.error('demo: request failed', error);
      return problem({ status: 500, slug: 'internal-error', title: 'Internal server error' });
    }
  };
  // Every answer carries Stripe's `error` member beside the problem's own (stripe-error.ts), replays included.
  const app = async (request: Request): Promise<Response> => withStripeError(await answer(request));
  return Object.assign(app, {
    dropsAfterCommit: (request: Request) => {
      const faults = lab ? labFaults(request.headers) : undefined;
      return faults !== undefined && (faults.drop || faults.crash) && !answered.has(request);
    },
    recover: (after: Promise<unknown> = Promise.resolve()) => {
      const marked = after.then(() => recoverWithRetries(journal));
      recovered = marked.catch(() => undefined);
      return marked;
    },
    admit,
  });
}

function unauthorized(): Response {
  return stripeProblem({
    status: 401,
    slug: 'unauthorized',
    title: 'Unauthorized',
    detail: 'Send a valid API key as `Authorization: Bearer <key>`.',
    headers: { 'www-authenticate': 'Bearer' },
  });
}

/**
 * Lab start-up: marks the requests a stopped process left running as interrupted. A pass that fails (the database
 * locked at start-up, say) is tried again, 5 times 2 s apart at most.
 */
async function recoverWithRetries(journal: LabJournal | undefined): Promise<number> {
  for (let pass = 1; ; pass++) {
    try {
      return (await journal?.recover()) ?? 0;
    } catch (error) {
      if (pass === 5) throw error;
      await sleep(2_000);
    }
  }
}

/** What `GET /v1/idempotency_records` shows: never the response body or any request header. */
export function publicRecord(record: IdempotencyRecord) {
  return {
    key: record.key,
    status: record.status,
    fingerprint: record.fingerprint,
    responseStatus: record.response?.status ?? null,
    retryable: record.status === 'failed' ? record.retryable : null,
    resultId: record.resultId,
    claimedAt: record.claimedAt,
    leaseExpiresAt: record.leaseExpiresAt,
    expiresAt: record.expiresAt,
  };
}

/** A path segment, percent-decoded; undefined when it is not valid percent-encoded UTF-8 (no such charge). */
function decodeId(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

function notFound(path: string): Response {
  return problem({ status: 404, slug: 'not-found', title: 'Not found', detail: `No route for ${path}.` });
}

function notAllowed(allow: string): Response {
  return problem({ status: 405, slug: 'method-not-allowed', title: 'Method not allowed', headers: { allow } });
}

export type { Charge };
