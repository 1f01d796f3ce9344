/** The statements the store sends (DDL aside: schema.ts), with `:name` placeholders compiled once per table. */
import type { RoundTrip } from '../contract.js';
import { claimSql } from './claim.js';
import { COLUMNS } from './codec.js';
import type { MysqlQueryable, MysqlValue } from './mysql-options.js';

/** A statement with `:name` placeholders, compiled once to mysql2's `?` form and the order of its values. */
export interface Statement {
  readonly sql: string;
  readonly names: readonly string[];
}

/** The statements, built once per store with the table's quoted name. */
export function statements(t: string) {
  return {
    claim: named(claimSql(t)),
    complete: named(`UPDATE ${t} SET status = :status, retryable = :retryable, result_id = :resultId,
  response_status = :responseStatus, response_headers = :responseHeaders, response_body = :responseBody
WHERE pk = :pk AND token = :token AND status = 'in_progress'`),
    // An abandoned renewal landing after a newer one must not shorten the lease: each column keeps its max. A
    // renewal that moves nothing still counts 1 (affectedRows is rows matched, under mysql2's default FOUND_ROWS).
    renew: named(`UPDATE ${t} SET lease_expires_at = GREATEST(lease_expires_at, :leaseExpiresAt),
  expires_at = GREATEST(expires_at, :expiresAt) WHERE pk = :pk AND token = :token AND status = 'in_progress'`),
    release: named(`DELETE FROM ${t} WHERE pk = :pk AND token = :token AND status = 'in_progress'`),
    get: named(`SELECT ${COLUMNS} FROM ${t} WHERE pk = :pk`),
    sweep: named(`DELETE FROM ${t} WHERE expires_at <= :now ORDER BY expires_at LIMIT :batch`),
    list: named(`SELECT ${COLUMNS} FROM ${t} WHERE scope = :scope ORDER BY claimed_at DESC, pk DESC LIMIT :limit`),
  };
}

/** Compiles `:name` placeholders to `?`, remembering the order. */
function named(text: string): Statement {
  const names: string[] = [];
  const sql = text.replace(/:([A-Za-z]+)/g, (_, name: string) => {
    names.push(name);
    return '?';
  });
  return { sql, names };
}

export function bind(statement: Statement, params: Record<string, MysqlValue>): MysqlValue[] {
  return statement.names.map((name) => {
    const value = params[name];
    if (value === undefined) throw new Error(`mysql store: no value for :${name}`);
    return value;
  });
}

export type Statements = ReturnType<typeof statements>;

/** How the store's parts send a statement with named values: counted, reported, prepared when asked. */
export type Run = (
  op: RoundTrip['op'],
  on: MysqlQueryable,
  statement: Statement,
  params: Record<string, MysqlValue>,
  prepare?: boolean,
) => Promise<unknown>;
