/**
 * @module The demo API as the pages use it: the session's lab sandbox key, and typed reads of the real endpoints.
 */
import type { LabEntry } from '../../src/lab-journal.js';

export type { LabClaim, LabEntry, LabFaults, LabRecord, LabWork } from '../../src/lab-journal.js';
export type { LabTakeover } from '../../src/lab-takeover.js';

const STORAGE_KEY = 'idem-lab-api-key';
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** `n` random characters from [a-z0-9] (crypto-random, unbiased). */
function randomId(n: number): string {
  let out = '';
  while (out.length < n) {
    for (const byte of crypto.getRandomValues(new Uint8Array(n))) {
      if (byte < 252 && out.length < n) out += ALPHABET[byte % 36];
    }
  }
  return out;
}

/**
 * This browser tab's lab sandbox key, `sk_lab_<16 [a-z0-9]>`, made once per session (sessionStorage). In lab mode
 * the server treats any such key as its own account, `acct_lab_<id>`.
 *
 * @example
 * fetch('/v1/balance', { headers: { authorization: `Bearer ${labKey()}` } })
 */
export function labKey(): string {
  const stored = sessionStorage.getItem(STORAGE_KEY);
  if (stored && /^sk_lab_[a-z0-9]{16}$/.test(stored)) return stored;
  return newLabKey();
}

/**
 * Switches this tab to a fresh sandbox account and returns its key.
 *
 * @example
 * await post('/v1/lab/reset'); newLabKey()
 */
export function newLabKey(): string {
  const key = `sk_lab_${randomId(16)}`;
  sessionStorage.setItem(STORAGE_KEY, key);
  return key;
}

/** The account a lab key names. */
export const accountOf = (apiKey: string): string => apiKey.replace(/^sk_lab_/, 'acct_lab_');

/**
 * A random UUID v4 (also where `crypto.randomUUID` is missing: pages served over plain HTTP off localhost).
 *
 * @example
 * const key = uuid()
 */
export function uuid(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = ((b[6] ?? 0) & 0x0f) | 0x40;
  b[8] = ((b[8] ?? 0) & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const auth = (): Record<string, string> => ({ authorization: `Bearer ${labKey()}` });

/** A non-2xx answer from a read, with its problem body when it has one. */
export class ApiError extends Error {
  readonly status: number;
  readonly body: unknown;
  constructor(status: number, body: unknown) {
    const detail =
      (body as { detail?: unknown; title?: unknown } | null)?.detail ?? (body as { title?: unknown } | null)?.title;
    super(`HTTP ${status}${typeof detail === 'string' ? `: ${detail}` : ''}`);
    this.name = 'ApiError';
    this.status = status;
    this.body = body;
  }
}

async function parse<T>(response: Response): Promise<T> {
  const text = await response.text();
  const body: unknown = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, body);
  return body as T;
}

/**
 * GETs a JSON endpoint as this tab's sandbox account.
 *
 * @example
 * const { charged } = await getJson<Balance>('/v1/balance')
 */
export async function getJson<T>(path: string): Promise<T> {
  return parse<T>(await fetch(path, { headers: auth(), cache: 'no-store' }));
}

/**
 * POSTs JSON as this tab's sandbox account.
 *
 * @example
 * await postJson('/v1/model/race', {})
 */
export async function postJson<T>(path: string, body: unknown = {}): Promise<T> {
  return parse<T>(
    await fetch(path, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    }),
  );
}

/** The headers for a request as this tab's account (the lab page adds its own per attempt). */
export const authHeaders = auth;

export interface Balance {
  readonly object: 'balance';
  /** Cents charged (succeeded charges only). */
  readonly charged: number;
  readonly count: number;
}

export interface PublicRecord {
  readonly key: string;
  readonly status: 'in_progress' | 'succeeded' | 'failed';
  readonly fingerprint: string;
  readonly responseStatus: number | null;
  readonly retryable: boolean | null;
  readonly resultId: string | null;
  readonly claimedAt: number;
  readonly leaseExpiresAt: number;
  readonly expiresAt: number;
}

export interface Charge {
  readonly id: string;
  readonly amount: number;
  readonly currency: string;
  readonly status: 'succeeded' | 'failed';
  readonly created: number;
}

export interface List<T> {
  readonly object: 'list';
  readonly data: readonly T[];
}

/** `GET /v1/lab/history`: what the server did with each request this sandbox account sent, and its charges. */
export interface LabHistory {
  readonly object: 'lab_history';
  readonly entries: readonly LabEntry[];
  /** The account's charges, newest first (status `failed` for a declined card: no money moved). */
  readonly charges: readonly Charge[];
}
