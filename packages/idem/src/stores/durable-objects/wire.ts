/**
 * What travels between the Worker's store and the object, as JSON: requests as the contract has them, records and
 * outcomes with the response body in base64 (the only bytes). Both sides use these, so they cannot disagree.
 */
import type { IdempotencyRecord, Outcome, StoredResponse } from '../contract.js';

/** A response as it travels: the body in base64. */
export interface WireResponse {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: string;
}

export type WireRecord = Omit<IdempotencyRecord, 'response'> & { readonly response: WireResponse | null };
export type WireOutcome = Omit<Outcome, 'response'> & { readonly response: WireResponse | null };

/** The operations the object answers: `POST https://idem/<op>` with a JSON body. */
export type Operation = 'claim' | 'complete' | 'renew' | 'release' | 'get' | 'list' | 'sweep';
export const OPERATIONS: ReadonlySet<string> = new Set<Operation>([
  'claim',
  'complete',
  'renew',
  'release',
  'get',
  'list',
  'sweep',
]);

const CHUNK = 0x8000;

export function toBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.length; i += CHUNK) binary += String.fromCharCode(...bytes.subarray(i, i + CHUNK));
  return btoa(binary);
}

export function fromBase64(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const sendResponse = (r: StoredResponse | null): WireResponse | null =>
  r && { status: r.status, headers: r.headers, body: toBase64(r.body) };
const readResponse = (r: WireResponse | null): StoredResponse | null =>
  r && { status: r.status, headers: r.headers, body: fromBase64(r.body) };

export const sendRecord = (record: IdempotencyRecord): WireRecord => ({
  ...record,
  response: sendResponse(record.response),
});
export const readRecord = (record: WireRecord): IdempotencyRecord => ({
  ...record,
  response: readResponse(record.response),
});
export const sendOutcome = (outcome: Outcome): WireOutcome => ({
  status: outcome.status,
  retryable: outcome.retryable,
  resultId: outcome.resultId,
  response: sendResponse(outcome.response),
});
export const readOutcome = (outcome: WireOutcome): Outcome => ({
  ...outcome,
  response: readResponse(outcome.response),
});
