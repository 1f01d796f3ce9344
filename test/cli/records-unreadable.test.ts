/**
 * `idem records` against rows written past the store (a compromised writer, a bad migration): a row whose fields
 * do not have the record's shape is one escaped line, and the rest of the scope is still listed.
 */
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordPk } from 'idem';
import { tempDir } from '../harness.js';
import { inProcess, keyHash } from './helpers.js';

const SCOPE = 'acct_hostile';
const NOW = Date.now();
/** The keys of the hostile rows; one carries an escape sequence, which is printed visibly. */
const KEYS = { huge: 'k-huge\u001b[2J', numberValue: 'k-number', notArray: 'k-object', good: 'k-good' } as const;
const notJson = (() => {
  try {
    JSON.parse('{not json');
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error('unreachable');
})();

describe('idem records with rows written past the store', () => {
  const dir = tempDir();
  const url = `sqlite:${dir.path}/hostile.db`;
  const list = (scope: string, ...more: string[]) =>
    inProcess(['records', 'list', '--store', url, '--scope', scope, ...more]);
  const show = (key: string, scope: string, ...more: string[]) =>
    inProcess(['records', 'show', key, '--store', url, '--scope', scope, ...more]);

  beforeAll(async () => {
    expect((await inProcess(['migrate', '--store', url])).code).toBe(0);
    const db = new Database(`${dir.path}/hostile.db`);
    const insert = db.prepare(
      `INSERT INTO idem_records (pk, scope, key, status, fingerprint, id, token, claimed_at, lease_expires_at,
         expires_at, retryable, result_id, response_status, response_headers, response_body)
       VALUES (@pk, @scope, @key, 'succeeded', 'fp', 'id', 't', @claimedAt, 0, @expiresAt, 0, 'ch_1', 201, @headers, @body)`,
    );
    const row = (scope: string, key: string, claimedAt: number, headers: string) =>
      insert.run({ pk: recordPk(scope, key), scope, key, claimedAt, expiresAt: NOW + 3_600_000, headers, body: 'x' });
    row(SCOPE, KEYS.huge, 9e18, '[]');
    row(SCOPE, KEYS.numberValue, NOW - 1_000, '[["x-a", 5]]');
    row(SCOPE, KEYS.notArray, NOW - 2_000, '{"a":"b"}');
    row(SCOPE, KEYS.good, NOW - 3_000, '[["content-type","application/json"]]');
    row('acct_json', 'k-bad-json', NOW, '{not json');
    db.close();
  });
  afterAll(() => dir.remove());

  it('records list: each hostile row is one escaped row saying why; the good record is listed; exit 0', async () => {
    const { code, stdout, stderr } = await list(SCOPE);
    const rows = stdout
      .trimEnd()
      .split('\n')
      .map((line) => line.replace(/ {2,}/g, ' | '));
    const iso = new Date(NOW - 3_000)
      .toISOString()
      .replace('T', ' ')
      .replace(/\.\d+Z$/, 'Z');
    const expires = new Date(NOW + 3_600_000)
      .toISOString()
      .replace('T', ' ')
      .replace(/\.\d+Z$/, 'Z');
    expect({ code, stderr, rows: rows.slice(2) }).toEqual({
      code: 0,
      stderr: '',
      rows: [
        `k-huge\\x1b[2J | ${keyHash(KEYS.huge)} | unreadable: claimedAt is not a time (9000000000000000000) | - | - | - | -`,
        `k-number | ${keyHash(KEYS.numberValue)} | unreadable: response header 0 is not a [name, value] pair of strings | - | - | - | -`,
        `k-object | ${keyHash(KEYS.notArray)} | unreadable: response headers are not a list (an object) | - | - | - | -`,
        `k-good | ${keyHash(KEYS.good)} | succeeded | 201 | ch_1 | ${iso} | ${expires}`,
        '4 records',
      ],
    });
  });

  it('records list --json: the hostile rows as { key, keyHash, pk, unreadable }, the good one whole', async () => {
    const { code, stdout } = await list(SCOPE, '--json');
    const records = JSON.parse(stdout) as Array<Record<string, unknown>>;
    expect(code).toBe(0);
    expect(records.slice(0, 3)).toEqual([
      {
        key: KEYS.huge,
        keyHash: keyHash(KEYS.huge),
        pk: recordPk(SCOPE, KEYS.huge),
        unreadable: 'claimedAt is not a time (9000000000000000000)',
      },
      {
        key: KEYS.numberValue,
        keyHash: keyHash(KEYS.numberValue),
        pk: recordPk(SCOPE, KEYS.numberValue),
        unreadable: 'response header 0 is not a [name, value] pair of strings',
      },
      {
        key: KEYS.notArray,
        keyHash: keyHash(KEYS.notArray),
        pk: recordPk(SCOPE, KEYS.notArray),
        unreadable: 'response headers are not a list (an object)',
      },
    ]);
    expect([records.length, records[3]?.key, records[3]?.status]).toEqual([4, KEYS.good, 'succeeded']);
  });

  it('records show of a hostile row: its key, hash, pk and why, one escaped line each; exit 1', async () => {
    const { code, stdout, stderr } = await show(KEYS.huge, SCOPE);
    expect({ code, stdout, stderr }).toEqual({
      code: 1,
      stdout: [
        'key         k-huge\\x1b[2J',
        `key hash    ${keyHash(KEYS.huge)}`,
        `pk          IDEMPOTENCY#${SCOPE}#k-huge\\x1b[2J`,
        'unreadable  claimedAt is not a time (9000000000000000000)',
        '',
      ].join('\n'),
      stderr: '',
    });
    const json = await show(KEYS.notArray, SCOPE, '--json');
    expect([json.code, JSON.parse(json.stdout)]).toEqual([
      1,
      {
        key: KEYS.notArray,
        keyHash: keyHash(KEYS.notArray),
        pk: recordPk(SCOPE, KEYS.notArray),
        unreadable: 'response headers are not a list (an object)',
      },
    ]);
  });

  it('a row the store cannot decode (headers not JSON): show says so; list says why it lists nothing', async () => {
    const shown = await show('k-bad-json', 'acct_json');
    expect([shown.code, shown.stdout.split('\n').at(-2)]).toEqual([
      1,
      `unreadable  the store cannot decode it (${notJson})`,
    ]);
    const listed = await list('acct_json');
    expect({ code: listed.code, stdout: listed.stdout, stderr: listed.stderr }).toEqual({
      code: 1,
      stdout: '',
      stderr: `idem records: a record in scope acct_json cannot be decoded by the store (${notJson}), so the store lists none of the scope; records show KEY reads a record on its own\n`,
    });
  });
});
