/**
 * Nothing stored reaches the operator's terminal raw: the escaper on its own, then `idem records list|show` — the
 * built binary, on a real SQLite file seeded through the store — with keys, scopes, ids, header names and values
 * and bodies full of escape sequences, C1 controls, bidi overrides and invisible characters.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordPk } from 'idem';
import { sqliteStore } from 'idem/stores/sqlite';
import { safeJson, visible } from '../../packages/idem/src/cli/escape.js';
import { tempDir } from '../harness.js';
import { CLI_BUILT, ROOT, keyHash } from './helpers.js';

describe('the escaper', () => {
  it('writes C0, DEL, C1 and the backslash visibly, and leaves printable text (é, —, ✓, U+00A0, emoji) alone', () => {
    expect(visible('\x00\x1b]0;t\x07\r\n\t\x7f\x80\x9b\x9f\\ é—✓\xa0😀')).toBe(
      '\\x00\\x1b]0;t\\x07\\x0d\\x0a\\x09\\x7f\\x80\\x9b\\x9f\\\\ é—✓\xa0😀',
    );
  });

  it('writes every format and invisible character visibly: Cf, Zl, Zp, the listed ones, tags, lone surrogates', () => {
    const cases: Array<[string, string]> = [
      ['\u202e\u2066\u2069\u200b\u200d\ufeff', '\\u202e\\u2066\\u2069\\u200b\\u200d\\ufeff'], // Cf: bidi, zero-width
      ['\u2028\u2029', '\\u2028\\u2029'], // Zl, Zp
      ['\u061c\u00ad\u180e\ufff9\ufffa\ufffb', '\\u061c\\xad\\u180e\\ufff9\\ufffa\\ufffb'],
      ['\u034f', '\\u034f'], // combining grapheme joiner
      ['\u115f\u1160\u3164\uffa0', '\\u115f\\u1160\\u3164\\uffa0'], // Hangul fillers
      ['\u{e0000}\u{e0001}\u{e0041}\u{e007f}', '\\u{e0000}\\u{e0001}\\u{e0041}\\u{e007f}'], // tag characters
      ['\u2800', '\\u2800'], // blank braille pattern
      ['a\ud800b\udfffc', 'a\\ud800b\\udfffc'], // lone surrogates
    ];
    expect(cases.map(([text]) => visible(text))).toEqual(cases.map(([, shown]) => shown));
  });

  it('keeps the backslash for text made visible already, and line feeds when asked', () => {
    expect(visible('a\\x1b\n\rb', { backslash: false, newlines: true })).toBe('a\\x1b\n\\x0db');
  });

  it('safeJson writes the same set as \\uXXXX (surrogate pairs above the BMP) and parses back to the same strings', () => {
    const value = { s: 'k\x1b\x7f\x9b\u202e\u00ad\u{e0041}\ud800é' };
    const json = safeJson(value);
    expect(json).toBe('{"s":"k\\u001b\\u007f\\u009b\\u202e\\u00ad\\udb40\\udc41\\ud800é"}');
    expect(JSON.parse(json)).toEqual(value);
  });
});

/** Runs the built `idem` and keeps stdout as bytes: a C1 control must be looked for in the UTF-8 it became. */
function idemBytes(args: readonly string[]): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  const child = spawn(process.execPath, [CLI_BUILT, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, NODE_NO_WARNINGS: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
  child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) =>
      resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') }),
    );
  });
}

/** What must never reach the terminal: ESC, CSI (C1, as UTF-8), BEL, CR, U+202E and the other invisibles. */
const RAW = [
  Buffer.from([0x1b]),
  Buffer.from('\x9b'),
  Buffer.from('\x07'),
  Buffer.from('\r'),
  Buffer.from('\u202e'),
  Buffer.from('\u00ad'),
  Buffer.from('\u2028'),
  Buffer.from('\u{e0041}'),
  Buffer.from('\u2800'),
];
const rawIn = (bytes: Buffer) => RAW.filter((raw) => bytes.includes(raw)).map((raw) => raw.toString('hex'));

const CLAIMED = Date.UTC(2025, 0, 2, 3, 4, 5);
const EXPIRES = Date.UTC(2125, 0, 2, 3, 4, 5);
const isoTime = (ms: number) => new Date(ms).toISOString().replace('T', ' ').replace('.000Z', 'Z');

/** A status with a screen clear, a C1 CSI and a bidi override, and how it must be printed. */
const STATUS_SCOPE = 'acct_status';
const STATUS = 'ok\x1b[2J\x9b31m\u202e';
const STATUS_SHOWN = 'ok\\x1b[2J\\x9b31m\\u202e';

describe('idem records prints stored strings escaped (built binary, SQLite)', () => {
  const dir = tempDir();
  const url = `sqlite:${dir.path}/idem.db`;
  // A title, a screen clear and a fake line in the key; a C1 CSI in the result id; a bidi override in the scope.
  const scope = 'acct_\u202eevil';
  const key = 'k\x1b]0;owned\x07\x1b[2J\rOK';
  const id = `${randomUUID()}\u2028x`;
  const resultId = 'ch_\x9b31m\u{e0041}';
  const header: [string, string] = ['x-t\u00ad', 'v\x1b]2;t\x1b\\\u2800\u3164'];
  const body = '{\n  "note": "\x1b[2J\x1b[H\u202eevil\u200b"\n}';
  beforeAll(async () => {
    const migrated = await idemBytes(['migrate', '--store', url]);
    expect([migrated.code, migrated.stderr]).toEqual([0, '']);
    const database = new Database(`${dir.path}/idem.db`);
    const store = sqliteStore({ database });
    try {
      const pk = recordPk(scope, key);
      const claim = { pk, scope, key, fingerprint: 'f'.repeat(64), token: randomUUID(), id };
      const claimed = await store.claim({ ...claim, now: CLAIMED, leaseMs: 60_000, ttlMs: EXPIRES - CLAIMED });
      expect(claimed.kind).toBe('claimed');
      const response = { status: 201, headers: [header], body: new TextEncoder().encode(body) };
      const outcome = { status: 'succeeded' as const, retryable: false, resultId, response };
      expect((await store.complete({ pk, token: claim.token, now: CLAIMED + 1, outcome })).ok).toBe(true);
      // A status no store writes, put there by hand past the CHECK constraint: one live record, one expired.
      for (const [one, ttlMs] of [
        ['live', EXPIRES - CLAIMED],
        ['gone', 1000],
      ] as const) {
        const token = randomUUID();
        const pkOf = recordPk(STATUS_SCOPE, one);
        const row = { pk: pkOf, scope: STATUS_SCOPE, key: one, fingerprint: 'f'.repeat(64), token, id: randomUUID() };
        expect((await store.claim({ ...row, now: CLAIMED, leaseMs: 60_000, ttlMs })).kind).toBe('claimed');
      }
      database.pragma('ignore_check_constraints = 1');
      database.prepare('UPDATE "idem_records" SET "status" = ? WHERE "scope" = ?').run(STATUS, STATUS_SCOPE);
    } finally {
      await store.close();
      database.close();
    }
  });
  afterAll(() => dir.remove());

  it('a hostile status (written past the CHECK constraint) is escaped in list and show, live or expired', async () => {
    const listed = await idemBytes(['records', 'list', '--store', url, '--scope', STATUS_SCOPE]);
    const shown = await idemBytes(['records', 'show', 'gone', '--store', url, '--scope', STATUS_SCOPE]);
    expect([listed.code, listed.stderr, rawIn(listed.stdout), shown.code, shown.stderr, rawIn(shown.stdout)]).toEqual([
      0,
      '',
      [],
      0,
      '',
      [],
    ]);
    expect(
      listed.stdout
        .toString('utf8')
        .split('\n')
        .slice(2, 4)
        .map((line) => line.split(/  +/).slice(0, 3).join(' | '))
        .sort(),
    ).toEqual([`gone | ${keyHash('gone')} | ${STATUS_SHOWN} (expired)`, `live | ${keyHash('live')} | ${STATUS_SHOWN}`]);
    const status = shown.stdout
      .toString('utf8')
      .split('\n')
      .find((line) => line.startsWith('status '));
    expect(status).toBe(`status         ${STATUS_SHOWN} (expired)`);
  });

  it('list: the row shows the key and the result id escaped; no raw control or invisible byte', async () => {
    const { code, stdout, stderr } = await idemBytes(['records', 'list', '--store', url, '--scope', scope]);
    expect([code, stderr, rawIn(stdout)]).toEqual([0, '', []]);
    expect(stdout.toString('utf8').split('\n')[2]).toBe(
      `k\\x1b]0;owned\\x07\\x1b[2J\\x0dOK  ${keyHash(key)}  succeeded  201   ch_\\x9b31m\\u{e0041}  ${isoTime(CLAIMED)}  ${isoTime(EXPIRES)}`,
    );
  });

  it('show --body: every stored string escaped, the body’s line feeds kept', async () => {
    const { code, stdout, stderr } = await idemBytes([
      'records',
      'show',
      key,
      '--store',
      url,
      '--scope',
      scope,
      '--body',
    ]);
    expect([code, stderr, rawIn(stdout)]).toEqual([0, '', []]);
    const lines = stdout.toString('utf8').split('\n');
    const at = (name: string) => lines.find((line) => line.startsWith(`${name} `));
    expect([at('key'), at('scope'), at('pk'), at('id'), at('result'), at('  x-t\\xad')]).toEqual([
      'key            k\\x1b]0;owned\\x07\\x1b[2J\\x0dOK',
      'scope          acct_\\u202eevil',
      'pk             IDEMPOTENCY#acct_\\u202eevil#k\\x1b]0;owned\\x07\\x1b[2J\\x0dOK',
      `id             ${id.slice(0, -2)}\\u2028x`,
      'result         ch_\\x9b31m\\u{e0041}',
      '  x-t\\xad      v\\x1b]2;t\\x1b\\\\\\u2800\\u3164',
    ]);
    expect(stdout.toString('utf8').endsWith('\n\n{\n  "note": "\\x1b[2J\\x1b[H\\u202eevil\\u200b"\n}\n')).toBe(true);
  });

  it('--json: the same set written as \\uXXXX, and the JSON parses back to the exact stored strings', async () => {
    const listed = await idemBytes(['records', 'list', '--store', url, '--scope', scope, '--json']);
    const shown = await idemBytes(['records', 'show', key, '--store', url, '--scope', scope, '--json', '--body']);
    expect([listed.code, shown.code, rawIn(listed.stdout), rawIn(shown.stdout)]).toEqual([0, 0, [], []]);
    expect(shown.stdout.toString('utf8')).toContain('\n  "key": "k\\u001b]0;owned\\u0007\\u001b[2J\\rOK",\n');
    expect(shown.stdout.toString('utf8')).toContain('\n  "resultId": "ch_\\u009b31m\\udb40\\udc41",\n');
    const [fromList] = JSON.parse(listed.stdout.toString('utf8')) as Array<Record<string, unknown>>;
    const record = JSON.parse(shown.stdout.toString('utf8')) as Record<string, unknown>;
    const response = record.response as { headers: Record<string, string>; body: string };
    expect([fromList?.key, fromList?.scope, fromList?.id, fromList?.resultId]).toEqual([key, scope, id, resultId]);
    expect([record.key, record.pk, response.headers, response.body]).toEqual([
      key,
      recordPk(scope, key),
      Object.fromEntries([header]),
      body,
    ]);
  });

  it('what the operator typed is escaped too: a key not found, and an error message', async () => {
    const missing = await idemBytes(['records', 'show', 'x\x1b[2J', '--store', url, '--scope', scope]);
    expect([missing.code, missing.stderr]).toEqual([
      1,
      'idem records show: no record for key "x\\x1b[2J" in scope acct_\\u202eevil.\n',
    ]);
    const nowhere = await idemBytes(['records', 'list', '--store', `sqlite:${dir.path}/\x1b[2J.db`, '--scope', 's']);
    expect([nowhere.code, nowhere.stderr]).toEqual([
      1,
      `idem records: no SQLite database at ${dir.path}/\\x1b[2J.db (run idem migrate --store sqlite:${dir.path}/\\x1b[2J.db to create one).\n`,
    ]);
  });
});
