/**
 * The item ↔ record conversion at the store's edge (the attribute table is in index.ts): times in epoch
 * milliseconds, but `expiresAt` in seconds for native TTL beside the exact `expiresAtMs`.
 */
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import type { IdempotencyRecord, RecordStatus } from '../contract.js';
import { decodeHeaders } from '../shared/headers.js';
import type { DynamoDBAttributeNames } from './dynamodb-options.js';

export type Field = keyof DynamoDBAttributeNames;
export type Item = Record<string, AttributeValue>;

/** The item a fresh claim puts (no outcome yet). */
export function claimItem(key: Item, n: DynamoDBAttributeNames, record: IdempotencyRecord): Item {
  return {
    ...key,
    [n.scope]: str(record.scope),
    [n.key]: str(record.key),
    [n.status]: str(record.status),
    [n.fingerprint]: str(record.fingerprint),
    [n.id]: str(record.id),
    [n.token]: str(record.token),
    [n.claimedAt]: num(record.claimedAt),
    [n.leaseExpiresAt]: num(record.leaseExpiresAt),
    [n.expiresAt]: num(ttlSeconds(record.expiresAt)),
    [n.expiresAtMs]: num(record.expiresAt),
    [n.retryable]: { BOOL: record.retryable },
  };
}

export function decodeItem(n: DynamoDBAttributeNames, item: Item): IdempotencyRecord {
  const pk = item[n.pk]?.S ?? '(no pk)';
  const need = <T>(field: Field, value: T | undefined): T => {
    if (value === undefined) throw new Error(`dynamodb item ${pk} has no valid ${n[field]} attribute`);
    return value;
  };
  const s = (field: Field): string => need(field, item[n[field]]?.S);
  const ms = (field: Field): number => {
    const value = Number(need(field, item[n[field]]?.N));
    return need(field, Number.isFinite(value) ? value : undefined);
  };
  const status = s('status');
  if (status !== 'in_progress' && status !== 'succeeded' && status !== 'failed') need('status', undefined);
  const responseStatus = item[n.responseStatus]?.N;
  return {
    pk: s('pk'),
    scope: s('scope'),
    key: s('key'),
    status: status as RecordStatus,
    fingerprint: s('fingerprint'),
    id: s('id'),
    token: s('token'),
    claimedAt: ms('claimedAt'),
    leaseExpiresAt: ms('leaseExpiresAt'),
    expiresAt: ms('expiresAtMs'),
    retryable: need('retryable', item[n.retryable]?.BOOL),
    resultId: item[n.resultId]?.S ?? null,
    response:
      responseStatus === undefined
        ? null
        : {
            status: Number(responseStatus),
            headers: decodeHeaders(s('responseHeaders')),
            body: need('responseBody', item[n.responseBody]?.B),
          },
  };
}

/** Native TTL reads whole seconds; rounding up means TTL never deletes an item before it has expired. */
export function ttlSeconds(expiresAtMs: number): number {
  return Math.ceil(expiresAtMs / 1000);
}

export function str(value: string): AttributeValue {
  return { S: value };
}

export function num(value: number): AttributeValue {
  return { N: String(value) };
}
