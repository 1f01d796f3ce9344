/**
 * @module A charge's body, read once before the idempotency layer: JSON (`{"amount":500}`), or Stripe's wire format,
 * a form (`application/x-www-form-urlencoded`, `amount=500&currency=usd&metadata[order_id]=42`). Both are validated
 * by the same rules; a problem response names the field that is wrong.
 */
import { problem } from 'idem/http';

const CURRENCIES = new Set(['usd', 'eur', 'gbp']);
const SOURCES = new Set(['tok_visa', 'tok_mastercard', 'tok_chargeDeclined']);
/** A form of more fields is refused, as `qs` and Express's `urlencoded()` refuse one by default. */
export const MAX_FORM_FIELDS = 1000;

export interface ChargeParams {
  readonly amount: number;
  readonly currency: string;
  readonly source: string;
}

const invalid = (param: string, detail: string): Response =>
  problem({ status: 400, slug: 'parameter-invalid', title: 'Invalid parameter', detail, extensions: { param } });

const malformed = (title: string, detail: string): Response =>
  problem({ status: 400, slug: 'body-invalid', title, detail });

/**
 * Parses and validates a charge body: a form when `contentType` is `application/x-www-form-urlencoded`, JSON
 * otherwise (whatever the type says, as before forms were read).
 *
 * @example
 * parseCharge(new TextEncoder().encode('amount=500&currency=eur'), 'application/x-www-form-urlencoded')
 * // → { amount: 500, currency: 'eur', source: 'tok_visa' }
 */
export function parseCharge(body: Uint8Array, contentType: string | null): ChargeParams | Response {
  const fields = isForm(contentType) ? formFields(body) : jsonFields(body);
  if (fields instanceof Response) return fields;
  const { amount, currency = 'usd', source = 'tok_visa' } = fields;
  if (amount === undefined) return invalid('amount', '`amount` is required: an integer number of cents > 0.');
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0 || amount > 99_999_999) {
    return invalid('amount', '`amount` must be an integer number of cents from 1 to 99999999.');
  }
  if (typeof currency !== 'string' || !CURRENCIES.has(currency)) {
    return invalid('currency', `\`currency\` must be one of ${[...CURRENCIES].join(', ')}.`);
  }
  if (typeof source !== 'string' || !SOURCES.has(source)) {
    return invalid('source', `\`source\` must be one of ${[...SOURCES].join(', ')}.`);
  }
  return { amount, currency, source };
}

interface Fields {
  readonly amount?: unknown;
  readonly currency?: unknown;
  readonly source?: unknown;
}

function isForm(contentType: string | null): boolean {
  const type = (contentType ?? '').split(';')[0]?.trim().toLowerCase();
  return type === 'application/x-www-form-urlencoded';
}

function jsonFields(body: Uint8Array): Fields | Response {
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
  } catch {
    parsed = undefined;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return malformed('Malformed JSON', 'The body must be a JSON object.');
  return parsed;
}

/**
 * The charge's fields of a form body. `amount`, `currency` and `source` are read once each (a repeated one is
 * refused: which value is meant?); `amount` is its digits as a number. Other fields — `description`,
 * `metadata[order_id]` in bracket notation — are accepted and unused, as the same members of a JSON body are.
 */
function formFields(body: Uint8Array): Fields | Response {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return malformed('Malformed form body', 'The body must be UTF-8.');
  }
  // Counted before parsing: a crafted 1 MiB body of 500,000 fields costs a scan of 1,000 `&`, not a parse.
  for (let at = text.indexOf('&'), count = 1; at !== -1; at = text.indexOf('&', at + 1)) {
    if (++count > MAX_FORM_FIELDS)
      return malformed('Malformed form body', `A form body has at most ${MAX_FORM_FIELDS} fields.`);
  }
  const form = new URLSearchParams(text);
  const fields: Record<string, unknown> = {};
  for (const name of ['amount', 'currency', 'source'] as const) {
    const values = form.getAll(name);
    if (values.length > 1) return invalid(name, `\`${name}\` must be sent once.`);
    const [value] = values;
    if (value !== undefined) fields[name] = name === 'amount' && /^[0-9]+$/.test(value) ? Number(value) : value;
  }
  return fields;
}
