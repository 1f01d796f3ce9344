/** The hash ↔ record conversion at the store's edge: decimal milliseconds, `0`/`1` flags, a base64 body. */
import type { IdempotencyRecord, RecordStatus, StoredResponse } from '../contract.js';
import { decodeHeaders } from '../shared/headers.js';

const STATUSES: readonly string[] = ['in_progress', 'succeeded', 'failed'] satisfies RecordStatus[];

/** A record from `HGETALL`'s flat `[field, value, …]` reply; null when the key does not exist. */
export function decode(pk: string, reply: unknown): IdempotencyRecord | null {
  if (!Array.isArray(reply)) throw new Error(`redis returned a non-array record for ${pk}`);
  if (reply.length === 0) return null;
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), String(reply[i + 1]));
  const text = (name: string): string => {
    const value = fields.get(name);
    if (value === undefined) throw new Error(`redis record ${pk} has no ${name} field`);
    return value;
  };
  const time = (name: string): number => {
    const value = Number(text(name));
    if (!Number.isFinite(value)) throw new Error(`redis record ${pk} has a non-numeric ${name}`);
    return value;
  };
  const status = text('status');
  if (!STATUSES.includes(status)) throw new Error(`redis record ${pk} has an unknown status ${status}`);
  const responseStatus = fields.get('responseStatus');
  const response: StoredResponse | null =
    responseStatus === undefined
      ? null
      : {
          status: Number(responseStatus),
          headers: decodeHeaders(text('responseHeaders')),
          body: Uint8Array.from(Buffer.from(text('responseBody'), 'base64')),
        };
  return {
    pk,
    scope: text('scope'),
    key: text('key'),
    status: status as RecordStatus,
    fingerprint: text('fingerprint'),
    id: text('id'),
    token: text('token'),
    claimedAt: time('claimedAt'),
    leaseExpiresAt: time('leaseExpiresAt'),
    expiresAt: time('expiresAt'),
    retryable: text('retryable') === '1',
    resultId: fields.get('resultId') ?? null,
    response,
  };
}
