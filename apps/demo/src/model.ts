/**
 * @module The model page's API: the store's own contract operations (claim, complete, renew, release, get), run for
 * real against the running store, each answered with the raw requests the store sent and what its engine replied
 * (its `onRoundTrip` reports), the round trips it took, and the state machine's transition it made. Lab mode only,
 * on lab sandbox accounts only.
 */
import { randomBytes } from 'node:crypto';
import { isIdempotencyError, parseKey, recordPk } from 'idem';
import { problem } from 'idem/http';
import {
  EXPIRING_TTL_MS,
  MIN_MODEL_MS,
  MODEL_LEASE_MS,
  defaultLease,
  modelOps,
  outcomeFor,
  type ModelOptions,
} from './model-ops.js';
import { race } from './model-race.js';
import { OPERATIONS, attributeTypes } from './model-schema.js';
import { json } from './model-trips.js';

export { tripRecorder, type TripRecorder, type Recorded } from './model-trips.js';
export { refusedBy, type Refusal } from './model-race.js';
export type { ModelOptions } from './model-ops.js';

const badRequest = (detail: string, param: string): Response =>
  problem({ status: 400, slug: 'parameter-invalid', title: 'Invalid parameter', detail, extensions: { param } });

/**
 * The model routes under `/v1/model`, for `createApp({ model })`. Every operation is scoped to
 * `<account>/model`, so the model's rows never mix with the lab page's charges.
 *
 * | route | does |
 * |---|---|
 * | `GET /v1/model` | the store, the item's attributes with their stored types, the five operations' statements |
 * | `POST /v1/model/seed` | stages four rows: succeeded, failed (final), failed (retryable), in_progress |
 * | `POST /v1/model/claim` `{ key, ttlMs?, leaseMs? }` | Claim a request key: `store.claim` (lease < TTL) |
 * | `POST /v1/model/complete` `{ key, token, outcome, resultId? }` | Record the outcome: `store.complete` |
 * | `POST /v1/model/renew` `{ key, token, leaseMs? }` | Renew the lease: `store.renew` |
 * | `POST /v1/model/release` `{ key, token }` | Release the key: `store.release` |
 * | `GET /v1/model/read?key=` | Read a previous outcome: `store.get` |
 * | `POST /v1/model/race` | two claims of a fresh key that both read before either writes; `refusedBy` names what refused the loser |
 * | `POST /v1/model/expiring` | a succeeded row with a 10 s TTL |
 *
 * Each operation's answer carries `reading`: the transition it made (or none) and a sentence saying so, read from
 * the store's answer and the row read just before and after (`before`, `after`).
 *
 * @example
 * const model = modelRoutes({ store, trips, ttlMs: 86_400_000 })
 * const app = createApp({ ...config, ...backend, model })
 */
export function modelRoutes(
  options: ModelOptions,
): (request: Request, account: string) => Promise<Response | undefined> {
  const { store, trips, ttlMs, now = Date.now } = options;
  const ops = modelOps(options);

  const describe = async (scope: string) => {
    // Read one seeded row to see how this store actually writes the item (DynamoDB's type descriptors, SQLite's columns).
    const seeded = await trips.record(() => store.get(recordPk(scope, 'seed-succeeded')));
    return {
      store: store.name,
      scope,
      pk: { pattern: 'IDEMPOTENCY#<scope>#<key>', example: recordPk(scope, 'seed-succeeded') },
      attributes: attributeTypes(store, seeded.trips, seeded.value ?? null),
      operations: OPERATIONS[store.name] ?? OPERATIONS.default,
      ttlMs,
      leaseMs: defaultLease(ttlMs),
      expiringTtlMs: EXPIRING_TTL_MS,
    };
  };

  /** `leaseMs` and `ttlMs` of a claim or renewal: whole ms, in range, the lease shorter than the TTL. */
  const timing = (body: Record<string, unknown>): { ttlMs: number; leaseMs: number } | Response => {
    const ttl = body.ttlMs ?? ttlMs;
    if (typeof ttl !== 'number' || !Number.isSafeInteger(ttl) || ttl < MIN_MODEL_MS || ttl > ttlMs) {
      return badRequest(`\`ttlMs\` must be an integer from ${MIN_MODEL_MS} to ${ttlMs}.`, 'ttlMs');
    }
    const lease = body.leaseMs ?? defaultLease(ttl);
    if (typeof lease !== 'number' || !Number.isSafeInteger(lease) || lease < MIN_MODEL_MS || lease > MODEL_LEASE_MS) {
      return badRequest(`\`leaseMs\` must be an integer from ${MIN_MODEL_MS} to ${MODEL_LEASE_MS}.`, 'leaseMs');
    }
    if (lease >= ttl) return badRequest('`leaseMs` must be less than `ttlMs`: a record outlives its lease.', 'leaseMs');
    return { ttlMs: ttl, leaseMs: lease };
  };

  return async (request, account) => {
    const url = new URL(request.url);
    const path = url.pathname;
    if (path !== '/v1/model' && !path.startsWith('/v1/model/')) return undefined;
    if (!account.startsWith('acct_lab_')) {
      return problem({
        status: 403,
        slug: 'lab-account-required',
        title: 'Lab sandbox account required',
        detail:
          'The model page runs store operations on lab sandbox accounts only: send `Authorization: Bearer sk_lab_<id>`.',
      });
    }
    const scope = `${account}/model`;
    const method = request.method;

    if (path === '/v1/model') return method === 'GET' ? json(await describe(scope)) : notAllowed('GET');
    if (path === '/v1/model/read') {
      if (method !== 'GET') return notAllowed('GET');
      const key = readKey(url.searchParams.get('key'));
      return key instanceof Response ? key : json(await ops.get(scope, key));
    }
    if (method !== 'POST') return path.startsWith('/v1/model/') ? notAllowed('POST') : undefined;
    const body = await readJson(request);
    if (body instanceof Response) return body;

    switch (path) {
      case '/v1/model/seed':
        return json(await ops.seed(scope));
      case '/v1/model/race': {
        const key = `race-${randomBytes(6).toString('hex')}`;
        return json(await race(store, trips, () => ops.claimRequest(scope, key), now));
      }
      case '/v1/model/expiring':
        return json(await ops.expiring(scope));
    }
    const key = readKey(body.key);
    if (key instanceof Response) return key;
    if (path === '/v1/model/claim') {
      const chosen = timing(body);
      return chosen instanceof Response ? chosen : json(await ops.claim(scope, key, chosen));
    }
    const token = body.token;
    if (typeof token !== 'string' || token.length === 0 || token.length > 100) {
      return badRequest('`token` must be the token a claim returned.', 'token');
    }
    switch (path) {
      case '/v1/model/complete': {
        const resultId = body.resultId === undefined ? `ch_${randomBytes(8).toString('hex')}` : body.resultId;
        if (typeof resultId !== 'string' || !/^[A-Za-z0-9_]{1,64}$/.test(resultId)) {
          return badRequest('`resultId` must be 1-64 letters, digits or _.', 'resultId');
        }
        const outcome = outcomeFor(String(body.outcome), resultId);
        if (!outcome) return badRequest('`outcome` must be succeeded, failed-final or failed-retryable.', 'outcome');
        return json({ ...(await ops.complete(scope, key, token, outcome)), outcome: body.outcome });
      }
      case '/v1/model/renew': {
        const chosen = timing(body);
        return chosen instanceof Response ? chosen : json(await ops.renew(scope, key, token, chosen.leaseMs));
      }
      case '/v1/model/release':
        return json(await ops.release(scope, key, token));
      default:
        return undefined;
    }
  };
}

function readKey(raw: unknown): string | Response {
  if (typeof raw !== 'string') return badRequest('`key` is required: an Idempotency-Key value.', 'key');
  try {
    return parseKey(raw);
  } catch (error) {
    if (isIdempotencyError(error)) return badRequest(error.message, 'key');
    throw error;
  }
}

async function readJson(request: Request): Promise<Record<string, unknown> | Response> {
  const text = await request.text();
  if (text.length > 10_000) return badRequest('The body is too large.', 'body');
  if (text === '') return {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      return parsed as Record<string, unknown>;
  } catch {
    // answered below
  }
  return problem({
    status: 400,
    slug: 'body-invalid',
    title: 'Malformed JSON',
    detail: 'The body must be a JSON object.',
  });
}

function notAllowed(allow: string): Response {
  return problem({ status: 405, slug: 'method-not-allowed', title: 'Method not allowed', headers: { allow } });
}
