/** The DynamoDB store: one class; every command goes through its table (send.ts), counted and reported. */
import { DeleteItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { configError } from '../../core/errors.js';
import type * as C from '../contract.js';
import { encodeHeaders } from '../shared/headers.js';
import { bindMethods, RoundTripMeter } from '../shared/round-trips.js';
import { claim, MAX_CLAIM_ATTEMPTS } from './claim.js';
import { num, str, ttlSeconds, type Field, type Item } from './codec.js';
import {
  DEFAULT_ATTRIBUTE_NAMES,
  DEFAULT_LIST_INDEX,
  DYNAMODB_MAX_RESPONSE_BYTES,
  MAX_ATTRIBUTE_NAME_BYTES,
  type CreateTableOptions,
  type CreateTableResult,
  type DynamoDBAttributeNames,
  type DynamoDBStore,
  type DynamoDBStoreOptions,
} from './dynamodb-options.js';
import { list } from './list.js';
import { createTable, TABLE_NAME } from './schema.js';
import { DynamoTable } from './send.js';
import { sweep } from './sweep.js';

export class DynamoDBStoreImpl implements DynamoDBStore {
  readonly name = 'dynamodb';
  readonly acceptsEffects = false;
  readonly maxResponseBytes = DYNAMODB_MAX_RESPONSE_BYTES;
  /** The table as the operations reach it; nothing outside the store holds it. */
  readonly #t: DynamoTable;

  constructor({
    client,
    table,
    attributes = {},
    sortKey,
    listIndex = DEFAULT_LIST_INDEX,
    onRoundTrip,
  }: DynamoDBStoreOptions) {
    if (typeof client?.send !== 'function') throw configError('client', 'an object with a send(command) method');
    if (typeof table !== 'string' || !TABLE_NAME.test(table)) {
      throw configError('table', 'a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -)', table);
    }
    if (typeof attributes !== 'object' || attributes === null) throw configError('attributes', 'an object', attributes);
    for (const [field, name] of Object.entries(attributes)) {
      if (!(field in DEFAULT_ATTRIBUTE_NAMES)) {
        throw configError(`attributes.${field}`, `one of ${Object.keys(DEFAULT_ATTRIBUTE_NAMES).join(', ')}`);
      }
      if (typeof name !== 'string' || name.length === 0 || Buffer.byteLength(name) > MAX_ATTRIBUTE_NAME_BYTES) {
        throw configError(
          `attributes.${field}`,
          `a non-empty string of at most ${MAX_ATTRIBUTE_NAME_BYTES} bytes`,
          name,
        );
      }
    }
    if (sortKey !== undefined) {
      if (
        typeof sortKey?.name !== 'string' ||
        sortKey.name.length === 0 ||
        Buffer.byteLength(sortKey.name) > MAX_ATTRIBUTE_NAME_BYTES
      ) {
        throw configError(
          'sortKey.name',
          `a non-empty string of at most ${MAX_ATTRIBUTE_NAME_BYTES} bytes`,
          sortKey?.name,
        );
      }
      if (typeof sortKey.value !== 'string' || sortKey.value.length === 0) {
        throw configError('sortKey.value', 'a non-empty string', sortKey.value);
      }
    }
    if (typeof listIndex !== 'string' || !TABLE_NAME.test(listIndex)) {
      throw configError('listIndex', 'a DynamoDB index name (3-255 of a-z A-Z 0-9 _ . -)', listIndex);
    }
    const meter = new RoundTripMeter('dynamodb', onRoundTrip);
    const names: DynamoDBAttributeNames = Object.freeze({ ...DEFAULT_ATTRIBUTE_NAMES, ...attributes });
    const all = [...(Object.keys(names) as Field[]).map((field) => names[field]), ...(sortKey ? [sortKey.name] : [])];
    if (new Set(all).size !== all.length)
      throw configError('attributes', 'distinct names (including sortKey.name)', all);
    this.#t = new DynamoTable(client, table, names, sortKey, listIndex, meter);
    bindMethods(this);
  }

  get roundTrips(): number {
    return this.#t.meter.count;
  }

  /** See claim.ts: one conditional write, a second only to reclaim, and the races it closes. */
  claim(request: C.ClaimRequest): Promise<C.ClaimResult> {
    return claim(this.#t, request);
  }

  async complete({ pk, token, outcome, effects }: C.CompleteRequest): Promise<C.WriteResult> {
    this.#t.open();
    if (effects !== undefined) {
      throw new Error(
        'dynamodb store has no transaction for effects; key the work’s own write on the record id instead',
      );
    }
    const values: Item = {
      ':token': str(token),
      ':inProgress': str('in_progress'),
      ':status': str(outcome.status),
      ':retryable': { BOOL: outcome.retryable },
    };
    const set = ['#status = :status', '#retryable = :retryable'];
    const remove: string[] = [];
    if (outcome.resultId === null) remove.push('#resultId');
    else {
      set.push('#resultId = :resultId');
      values[':resultId'] = str(outcome.resultId);
    }
    if (outcome.response === null) remove.push('#responseStatus', '#responseHeaders', '#responseBody');
    else {
      set.push(
        '#responseStatus = :responseStatus',
        '#responseHeaders = :responseHeaders',
        '#responseBody = :responseBody',
      );
      values[':responseStatus'] = num(outcome.response.status);
      values[':responseHeaders'] = str(encodeHeaders(outcome.response.headers));
      values[':responseBody'] = { B: outcome.response.body };
    }
    const update = `SET ${set.join(', ')}${remove.length > 0 ? ` REMOVE ${remove.join(', ')}` : ''}`;
    return this.#t.heldWrite(
      new UpdateItemCommand({
        TableName: this.#t.table,
        Key: this.#t.key(pk),
        UpdateExpression: update,
        ...this.#t.condition('#token = :token AND #status = :inProgress', values, update),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
      'complete',
      pk,
      // Refused by its own earlier attempt: the item holds this token, already settled with this status.
      (item) => item !== null && item.token === token && item.status === outcome.status,
    );
  }

  /**
   * Moves the lease and the expiry (both expiry attributes: TTL's seconds and the exact milliseconds), each only
   * forward. Refused by an item still ours that is already as far on (a newer renewal, or this write's own earlier
   * attempt), it is `ok: true`; already further on in one attribute only, it writes the later of each.
   */
  async renew({ pk, token, now, leaseMs, expiresAt }: C.RenewRequest): Promise<C.WriteResult> {
    this.#t.open();
    const update = 'SET #leaseExpiresAt = :lease, #expiresAt = :ttl, #expiresAtMs = :expiresAtMs';
    // An abandoned renewal landing after a newer one must not shorten the lease: it writes nothing it would move back.
    const held =
      '#token = :token AND #status = :inProgress AND #leaseExpiresAt <= :lease AND #expiresAtMs <= :expiresAtMs';
    let [lease, expires] = [now + leaseMs, expiresAt];
    for (let attempt = 0; attempt < MAX_CLAIM_ATTEMPTS; attempt++) {
      const values = { ':token': str(token), ':inProgress': str('in_progress'), ':lease': num(lease) };
      const ttl = { ':ttl': num(ttlSeconds(expires)), ':expiresAtMs': num(expires) };
      const seen = await this.#t.conditionalWrite(
        new UpdateItemCommand({
          TableName: this.#t.table,
          Key: this.#t.key(pk),
          UpdateExpression: update,
          ...this.#t.condition(held, { ...values, ...ttl }, update),
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
        'renew',
        pk,
      );
      if (seen === undefined) return { ok: true };
      if (seen?.token !== token || seen.status !== 'in_progress') return { ok: false };
      if (seen.leaseExpiresAt >= lease && seen.expiresAt >= expires) return { ok: true };
      [lease, expires] = [Math.max(lease, seen.leaseExpiresAt), Math.max(expires, seen.expiresAt)];
    }
    throw new Error(`dynamodb renew of ${pk} did not settle after ${MAX_CLAIM_ATTEMPTS} attempts (contention)`);
  }

  async release({ pk, token }: C.ReleaseRequest): Promise<C.WriteResult> {
    this.#t.open();
    return this.#t.heldWrite(
      new DeleteItemCommand({
        TableName: this.#t.table,
        Key: this.#t.key(pk),
        ...this.#t.condition('#token = :token AND #status = :inProgress', {
          ':token': str(token),
          ':inProgress': str('in_progress'),
        }),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
      'release',
      pk,
      // Refused because the item is gone (its own earlier attempt deleted it): the key is free, as release wants.
      (item) => item === null,
    );
  }

  async get(pk: string): Promise<C.IdempotencyRecord | null> {
    this.#t.open();
    return this.#t.read('get', pk);
  }

  sweep(request: C.SweepRequest): Promise<number> {
    return sweep(this.#t, request);
  }

  list(request: C.ListRequest): Promise<C.IdempotencyRecord[]> {
    return list(this.#t, request);
  }

  async close(): Promise<void> {
    this.#t.meter.close();
  }

  createTable(options?: CreateTableOptions): Promise<CreateTableResult> {
    return createTable(this.#t, options);
  }
}
