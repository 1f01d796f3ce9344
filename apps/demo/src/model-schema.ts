/**
 * @module The model page's description of the item: every attribute with the type this store gives it, and the
 * statement or script behind each contract operation, by store.
 */
import type { IdempotencyRecord, RoundTrip } from 'idem';

/** The contract's five operations, each as the page names its pattern. */
export interface Operations {
  readonly claim: string;
  readonly complete: string;
  readonly renew: string;
  readonly release: string;
  readonly get: string;
}

/** The statement or script behind each contract operation, by store name. */
export const OPERATIONS: Record<string, Operations> = {
  dynamodb: {
    claim:
      'PutItem with ConditionExpression attribute_not_exists(pk) OR expired; a claimable row is taken over by an UpdateItem conditioned on its token',
    complete: 'UpdateItem (condition: token and in_progress)',
    renew: 'UpdateItem (condition: token and in_progress), pushing leaseExpiresAt and expiresAt forward',
    release: 'DeleteItem (condition: token and in_progress)',
    get: 'GetItem (consistent read)',
  },
  sqlite: {
    claim:
      'BEGIN IMMEDIATE; INSERT … ON CONFLICT (pk) DO UPDATE … WHERE <claimable> AND token IS <the token read> RETURNING *: the conditional write. A SELECT of the row first is a shortcut that answers a refusal without the write lock.',
    complete: 'UPDATE … WHERE token = ? AND status = in_progress',
    renew: 'UPDATE … SET lease_expires_at = max(lease_expires_at, ?) … WHERE token = ? AND status = in_progress',
    release: 'DELETE … WHERE token = ? AND status = in_progress',
    get: 'SELECT * … WHERE pk = ?',
  },
  postgres: {
    claim:
      'INSERT … ON CONFLICT (pk) DO UPDATE … WHERE <claimable> AND token IS NOT DISTINCT FROM <the token cur read> RETURNING *: the conditional write, one statement. Its WITH cur read of the row is a shortcut that answers a refusal without locking.',
    complete: 'UPDATE … WHERE token = $2 AND status = in_progress',
    renew: 'UPDATE … SET lease_expires_at = GREATEST(lease_expires_at, $3) … WHERE token = $2 AND status = in_progress',
    release: 'DELETE … WHERE token = $2 AND status = in_progress',
    get: 'SELECT … WHERE pk = $1',
  },
  redis: {
    claim: 'EVALSHA claim script: check and write in one atomic step (one hash key)',
    complete: 'EVALSHA complete script: HSET the outcome if the token holds and the row is in_progress',
    renew: 'EVALSHA renew script: push the lease and the key’s PEXPIRE forward if the token holds',
    release: 'EVALSHA release script: DEL the key if the token holds and the row is in_progress',
    get: 'EVALSHA get script: HGETALL',
  },
  memory: {
    claim: 'Map get + set in one synchronous step',
    complete: 'Map set if the token holds',
    renew: 'Map set of the lease if the token holds',
    release: 'Map delete if the token holds',
    get: 'Map get',
  },
  default: { claim: 'claim', complete: 'complete', renew: 'renew', release: 'release', get: 'get' },
};

/**
 * Every attribute of the item, as the page shows them, with the type this store gives each: DynamoDB's type
 * descriptor from the item it returned, SQLite's declared column type, the declared types of the other network
 * stores, otherwise the JavaScript type of the value the store holds (memory).
 */
export function attributeTypes(store: object, trips: readonly RoundTrip[], record: IdempotencyRecord | null) {
  const ms = (name: string) => (name.endsWith('At') ? 'epoch ms' : '');
  for (const trip of trips) {
    const item = (trip.response as { Item?: Record<string, Record<string, unknown>> } | undefined)?.Item;
    if (item && typeof item === 'object') {
      return {
        source: 'the type descriptors of the item GetItem returned',
        fields: FIELDS.map((f) => {
          const descriptor = item[f.name];
          const type = descriptor ? (Object.keys(descriptor)[0] ?? '?') : 'absent while empty';
          const unit =
            f.name === 'expiresAt' ? 'epoch seconds, for native TTL (expiresAtMs holds the exact ms)' : ms(f.name);
          return { ...f, storedAs: f.name, type, unit };
        }),
      };
    }
  }
  const sqlite = store as {
    database?: { prepare?: (sql: string) => { all: (...p: unknown[]) => unknown[] } };
    table?: unknown;
  };
  if (typeof sqlite.database?.prepare === 'function' && typeof sqlite.table === 'string') {
    const table = sqlite.table;
    const columns = sqlite.database.prepare('SELECT name, type FROM pragma_table_info(?)').all(table) as Array<{
      name: string;
      type: string;
    }>;
    const declared = new Map(columns.map((c) => [c.name, c.type]));
    return {
      source: `the declared column types of ${table} (PRAGMA table_info)`,
      fields: FIELDS.map((f) => ({
        ...f,
        storedAs: `${table}.${f.column}`,
        type: declared.get(f.column) ?? '?',
        unit: ms(f.name),
      })),
    };
  }
  const known = DECLARED[(store as { name?: string }).name ?? ''];
  if (known) {
    return {
      source: "the store's schema",
      fields: FIELDS.map((f) => ({ ...f, storedAs: known.name(f), type: known.type(f), unit: known.unit(f) })),
    };
  }
  const flat: Record<string, unknown> | undefined = record
    ? {
        ...record,
        responseStatus: record.response?.status,
        responseHeaders: record.response?.headers,
        responseBody: record.response?.body,
      }
    : undefined;
  return {
    source: 'the values the store holds (JavaScript types)',
    fields: FIELDS.map((f) => {
      const value = flat?.[f.name];
      const type =
        value === undefined
          ? '?'
          : value === null
            ? 'null'
            : value instanceof Uint8Array
              ? 'Uint8Array'
              : Array.isArray(value)
                ? 'array'
                : typeof value;
      return { ...f, storedAs: f.name, type, unit: ms(f.name) };
    }),
  };
}

interface Field {
  readonly name: string;
  readonly column: string;
  /** Its Postgres column type (schema.sql). */
  readonly pg: string;
  readonly meaning: string;
}

/** Every attribute of an `IdempotencyKey` item, in the order the page lists them. */
const FIELDS: readonly Field[] = [
  { name: 'pk', column: 'pk', pg: 'text', meaning: "the item's address: IDEMPOTENCY#<scope>#<key>" },
  {
    name: 'scope',
    column: 'scope',
    pg: 'text',
    meaning: 'whose key it is (the account), so two accounts never share a row',
  },
  { name: 'key', column: 'key', pg: 'text', meaning: 'the Idempotency-Key the client sent' },
  { name: 'status', column: 'status', pg: 'text', meaning: 'in_progress → succeeded or failed' },
  {
    name: 'fingerprint',
    column: 'fingerprint',
    pg: 'text',
    meaning: 'SHA-256 of the request: method, path, sorted query and body (canonical JSON); a retry must match it',
  },
  {
    name: 'id',
    column: 'id',
    pg: 'text',
    meaning:
      "the record's stable id: kept by takeovers and reclaims, new once the row is absent or expired; the work passes it to the processor as the processor's own idempotency key",
  },
  {
    name: 'token',
    column: 'token',
    pg: 'text',
    meaning: "the current claim's secret: only its holder may complete, renew or release",
  },
  { name: 'claimedAt', column: 'claimed_at', pg: 'bigint', meaning: 'when the current claim was made' },
  {
    name: 'leaseExpiresAt',
    column: 'lease_expires_at',
    pg: 'bigint',
    meaning: 'until when the claim holds; renewals push it forward; once it passes, a retry may take over',
  },
  { name: 'expiresAt', column: 'expires_at', pg: 'bigint', meaning: 'when the row stops counting (the TTL)' },
  { name: 'retryable', column: 'retryable', pg: 'boolean', meaning: 'for failed: may a retry run the work again' },
  { name: 'resultId', column: 'result_id', pg: 'text', meaning: 'what the work produced (the charge id)' },
  { name: 'responseStatus', column: 'response_status', pg: 'integer', meaning: "the stored answer's status" },
  { name: 'responseHeaders', column: 'response_headers', pg: 'jsonb', meaning: "the stored answer's headers" },
  {
    name: 'responseBody',
    column: 'response_body',
    pg: 'bytea',
    meaning: "the stored answer's body, replayed byte for byte",
  },
];

/** What the network stores declare (their schema.sql and scripts), for stores whose replies do not carry types. */
const DECLARED: Record<string, { name(f: Field): string; type(f: Field): string; unit(f: Field): string }> = {
  postgres: {
    name: (f) => f.column,
    type: (f) => f.pg,
    unit: (f) => (f.name.endsWith('At') ? 'epoch ms' : ''),
  },
  redis: {
    name: (f) => (f.name === 'pk' ? 'the Redis key (prefix + pk)' : `hash field ${f.name}`),
    type: () => 'string',
    unit: (f) =>
      f.name === 'expiresAt'
        ? 'epoch ms as decimal digits; the key itself is deleted then (PEXPIRE)'
        : f.name.endsWith('At')
          ? 'epoch ms as decimal digits'
          : '',
  },
};
