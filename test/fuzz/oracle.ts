/**
 * What the payments API must answer to a request, worked out independently of the server's code from
 * docs/DESIGN.md (HTTP layer, Payments demo): the key rules (1–255 visible ASCII characters, an sf-string `"..."` unquoted, a bare key
 * without quotes), the charge body (a JSON object, or with the form type UTF-8 form fields — at most 1,000, each of
 * amount/currency/source at most once, `amount` as digits; `amount` an integer of cents 1…99 999 999; `currency` one of
 * usd/eur/gbp, default usd; `source` one of three test tokens, default tok_visa), the 1 MiB body limit, and the
 * order the demo checks them in (route, then credentials, then size, then body, then key).
 */

export const MiB = 1_048_576;
export const API_KEY = 'sk_live_alice';
const CURRENCIES = new Set(['usd', 'eur', 'gbp']);
const SOURCES = new Set(['tok_visa', 'tok_mastercard', 'tok_chargeDeclined']);

export interface ChargeParams {
  readonly amount: number;
  readonly currency: string;
  readonly source: string;
}

/** A request as the server will see it once HTTP framing is done. */
export interface SeenRequest {
  readonly method: string;
  /** Path and query, e.g. `/v1/charges?x=1`. */
  readonly target: string;
  readonly authorization: string | null;
  /** Every `Idempotency-Key` header value, in order (none, one, or duplicates). */
  readonly keys: readonly string[];
  readonly body: Uint8Array;
  /** The `Content-Type` sent: `application/x-www-form-urlencoded` makes the body a form; anything else is JSON. */
  readonly contentType?: string | null;
}

/** The exact answer expected, and whether it adds a charge (and, keyed, a record). */
export interface Expected {
  readonly status: number;
  /** 201 or 402: a charge row is written. */
  readonly charges: boolean;
  /** The charge's parameters when `charges`. */
  readonly params?: ChargeParams;
  /** A record is stored (a charge made with a valid key). */
  readonly records: boolean;
}

/** Leading and trailing HTTP whitespace is not part of a header value (RFC 9110 §5.5). */
const trimOws = (value: string): string => value.replace(/^[ \t]+|[ \t]+$/g, '');

/**
 * True when `raw` (one header value) is a valid Idempotency-Key.
 *
 * @example
 * keyIsValid('"a\\"b"') // → true (the key is a"b)
 */
export function keyIsValid(raw: string): boolean {
  const value = trimOws(raw);
  let key: string;
  if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) {
    const inner = value.slice(1, -1);
    if (!/^(?:[^"\\]|\\["\\])*$/s.test(inner)) return false;
    key = inner.replace(/\\(["\\])/g, '$1');
  } else {
    if (value.includes('"')) return false;
    key = value;
  }
  return /^[\x21-\x7e]{1,255}$/.test(key);
}

/**
 * The charge a body asks for, or undefined when the demo must refuse it with 400.
 *
 * @example
 * chargeOf(Buffer.from('{"amount":500}')) // → { amount: 500, currency: 'usd', source: 'tok_visa' }
 */
export function chargeOf(body: Uint8Array, contentType: string | null = null): ChargeParams | undefined {
  let value: unknown;
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(body);
    value = /^application\/x-www-form-urlencoded\s*(;|$)/i.test(contentType ?? '') ? formOf(text) : JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const fields = value as Record<string, unknown>;
  const amount = fields.amount;
  const currency = fields.currency === undefined ? 'usd' : fields.currency;
  const source = fields.source === undefined ? 'tok_visa' : fields.source;
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount < 1 || amount > 99_999_999)
    return undefined;
  if (typeof currency !== 'string' || !CURRENCIES.has(currency)) return undefined;
  if (typeof source !== 'string' || !SOURCES.has(source)) return undefined;
  return { amount, currency, source };
}

/**
 * The answer the demo owes `request` (lab mode off, account `sk_live_alice`, every valid key unused so far).
 *
 * @example
 * expected({ method: 'POST', target: '/v1/charges', authorization: 'Bearer sk_live_alice', keys: [], body })
 */
export function expected(request: SeenRequest): Expected {
  const refused = (status: number): Expected => ({ status, charges: false, records: false });
  const path = request.target.split('?')[0] ?? '';
  // The HTTP bridge decides on the head first (app.admit): outside /v1/ and for a caller without a valid API key the
  // body is never read, so its size cannot matter. Only an admitted POST's body is counted, and past 1 MiB it is 413.
  if (!path.startsWith('/v1/')) return refused(404);
  const authorized =
    request.authorization !== null && /^Bearer (\S+)$/.exec(trimOws(request.authorization))?.[1] === API_KEY;
  if (!authorized) return refused(401);
  if (request.method !== 'GET' && request.method !== 'HEAD' && request.body.byteLength > MiB) return refused(413);
  if (path === '/v1/charges') {
    if (request.method === 'GET') return { status: 200, charges: false, records: false };
    if (request.method !== 'POST') return refused(405);
  } else if (/^\/v1\/charges\/[^/]+$/.test(path)) {
    return refused(request.method === 'GET' ? 404 : 405);
  } else {
    return refused(404);
  }
  const params = chargeOf(request.body, request.contentType ?? null);
  if (!params) return refused(400);
  if (request.keys.length > 1) return refused(400); // folded into `a, b`: a space is not a key character
  const keyed = request.keys.length === 1;
  if (keyed && !keyIsValid(request.keys[0] as string)) return refused(400);
  return { status: params.source === 'tok_chargeDeclined' ? 402 : 201, charges: true, params, records: keyed };
}

/** A form's charge fields as JSON would give them (`amount` digits as a number); undefined for a refused form. */
function formOf(text: string): Record<string, unknown> | undefined {
  if (text.split('&').length > 1000) return undefined;
  const form = new URLSearchParams(text);
  const fields: Record<string, unknown> = {};
  for (const name of ['amount', 'currency', 'source']) {
    const values = form.getAll(name);
    if (values.length > 1) return undefined;
    if (values[0] !== undefined)
      fields[name] = name === 'amount' && /^\d+$/.test(values[0]) ? Number(values[0]) : values[0];
  }
  return fields;
}
