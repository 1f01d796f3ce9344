/**
 * The redaction, hostile review rev42 of issue 30 (item 2): a password with `/` then `#` in an http(s) URL, a value
 * with quoting escapes (`}}`, `""`, `''`, `\'`), an Authorization header of any scheme, `?jwt=` and `#code=` — each
 * masked whole; and a credential name before a brace, a quote or a scheme that never closes costs one scan, not one
 * per name (it was quadratic: 7.4 s for 256 K characters).
 */
import { describe, expect, it } from 'vitest';
import { redact, redactUrl } from './store-url.js';

/** A URL (given to `redactUrl`) or a text (given to `redact`), then as printed. */
const CASES: ReadonlyArray<readonly [string, string]> = [
  // An @ after the authority: everything from // to the last @ is masked.
  ['https://u:443/#S3CRET@api.example.com/', 'https://***@api.example.com/'],
  ['https://u:443/x#S3CRET@h', 'https://***@h'],
  ['http://u:80/?q#S3CRET@h/p', 'http://***@h/p'],
  ['https://u:443/a/S3CRET@h/v1?limit=3', 'https://***@h/v1?limit=3'],
  // ?jwt= and #code= (and ?code=) are credentials.
  ['postgres://app@db:5432/ledger?jwt=S3CRET&sslmode=require', 'postgres://app@db:5432/ledger?jwt=***&sslmode=require'],
  ['https://api.example/v1?jwt=S3CRET&page=2', 'https://api.example/v1?jwt=***&page=2'],
  ['https://app.example/cb#code=S3CRET&state=xyz', 'https://app.example/cb#code=***&state=xyz'],
  ['https://app.example/cb?code=S3CRET&state=xyz', 'https://app.example/cb?code=***&state=xyz'],
  ['host=db jwt=S3CRET user=app', 'host=db jwt=*** user=app'],
  // A quoted or braced value, masked to its real end.
  ['Server=db;Pwd={ab}}S3CRET};Uid=app', 'Server=db;Pwd=***;Uid=app'],
  ['Server=db;Password="ab""S3CRET";Uid=app', 'Server=db;Password="***";Uid=app'],
  ["Server=db;Password='ab''S3CRET';Uid=app", "Server=db;Password='***';Uid=app"],
  ["host=db password='it\\'s S3CRET' user=app", "host=db password='***' user=app"],
  ['{"password":"a\\"b S3CRET","user":"app"}', '{"password":"***","user":"app"}'],
];

describe('an @ after the authority, ?jwt=, #code=, quoting escapes: masked whole', () => {
  it.each(CASES)('%s → %s', (given, shown) => {
    expect(/^[a-z]+:\/\//.test(given) ? redactUrl(given) : redact(given)).toBe(shown);
  });
});

describe('redact: an Authorization header is masked to the end of its line, whatever its scheme', () => {
  it.each([
    ['Negotiate S3CRET'],
    ['NTLM S3CRET'],
    ['ApiKey S3CRET'],
    ['DPoP S3CRET'],
    ['HMAC a=b, S3CRET'],
    ['SharedKey acct:S3CRET'],
  ])('Authorization: %s', (value) => {
    expect(redact(`GET /v1\nAuthorization: ${value}\nHost: api`)).toBe('GET /v1\nAuthorization: ***\nHost: api');
    expect(redact(`proxy-authorization: ${value}`)).toBe('proxy-authorization: ***');
  });

  it('another credential name with a scheme: the value after it', () => {
    expect(redact('token: Negotiate S3CRET next')).toBe('token: *** next');
  });
});

describe('redact: a value that never closes is scanned once', () => {
  const N = 43_000;
  it.each([
    [';Pwd={', ';Pwd=***'],
    [' auth: {', ' auth: ***'],
    [';Pwd={a}}', ';Pwd=***'],
    [' Authorization: x', ' Authorization: ***'],
  ])('%j repeated (about 256 K characters): masked from the first to the end', (unit, shown) => {
    expect(redact(unit.repeat(N))).toBe(shown);
  });
});
