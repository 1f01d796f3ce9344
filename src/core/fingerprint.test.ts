import { describe, expect, it } from 'vitest';
import { canonicalJson, fingerprint, fingerprintsEqual } from './fingerprint.js';

const json = (text: string) => new TextEncoder().encode(text);
const post = (body: string, overrides: Partial<Parameters<typeof fingerprint>[0]> = {}) =>
  fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body: json(body), ...overrides });

describe('canonicalJson', () => {
  it('sorts keys, drops whitespace and writes numbers in one exact form', () => {
    expect(canonicalJson(json('{ "b": 1.50, "a": [true, null, "x"] }'))).toBe('{"a":[true,null,"x"],"b":15e-1}');
    expect(canonicalJson(json('100'))).toBe('1e2');
    expect(canonicalJson(json('1E2'))).toBe('1e2');
    expect(canonicalJson(json('-0.0'))).toBe('0');
    expect(canonicalJson(json('"\\u0041"'))).toBe('"A"');
  });

  it('keeps precision JSON.parse would lose', () => {
    expect(canonicalJson(json('9007199254740993'))).toBe('9007199254740993e0');
    expect(canonicalJson(json('9007199254740992'))).toBe('9007199254740992e0');
  });

  it('keeps the last of duplicate keys, as JSON.parse does', () => {
    expect(canonicalJson(json('{"a":1,"a":2}'))).toBe('{"a":2e0}');
  });

  it('returns undefined for non-JSON, bad UTF-8 and nesting deeper than 256', () => {
    expect(canonicalJson(json('{"a":'))).toBeUndefined();
    expect(canonicalJson(json('{"a":1} x'))).toBeUndefined();
    expect(canonicalJson(json("{'a':1}"))).toBeUndefined();
    expect(canonicalJson(new Uint8Array([0x22, 0xff, 0x22]))).toBeUndefined();
    expect(canonicalJson(json('['.repeat(256) + ']'.repeat(256)))).toBe('['.repeat(256) + ']'.repeat(256));
    expect(canonicalJson(json('['.repeat(300) + ']'.repeat(300)))).toBeUndefined();
    expect(canonicalJson(json('['.repeat(100_000)))).toBeUndefined();
  });
});

describe('fingerprint', () => {
  it('is a 64-character hex SHA-256', () => {
    expect(post('{}')).toMatch(/^[0-9a-f]{64}$/);
  });

  it('ignores JSON key order and whitespace', () => {
    expect(post('{"a":1,"b":2}')).toBe(post('{"b":2, "a":1}'));
    expect(post('{"amount":50000,"currency":"usd"}')).toBe(post('{\n "currency": "usd",\n "amount": 5e4\n}'));
  });

  it('differs for another payload, method, route, query or configured header', () => {
    const base = post('{"amount":50000}');
    expect(post('{"amount":500000}')).not.toBe(base);
    expect(post('{"amount":50000}', { method: 'PUT' })).not.toBe(base);
    expect(post('{"amount":50000}', { path: '/v1/refunds' })).not.toBe(base);
    expect(post('{"amount":50000}', { query: 'expand=customer' })).not.toBe(base);
    expect(post('{"amount":50000}', { headers: [['x-api-version', '2']] })).not.toBe(base);
  });

  it('sorts query pairs and header names', () => {
    expect(post('{}', { query: '?b=2&a=1' })).toBe(post('{}', { query: 'a=1&b=2' }));
    expect(post('{}', { headers: [['B', '1'], ['a', '2']] })).toBe(post('{}', { headers: [['a', '2'], ['b', '1']] }));
  });

  it('hashes non-JSON bodies as raw bytes', () => {
    const form = (body: string) => post(body, { contentType: 'application/x-www-form-urlencoded' });
    expect(form('a=1&b=2')).not.toBe(form('b=2&a=1'));
    expect(post('{"a":1}', { contentType: 'text/plain' })).not.toBe(post('{ "a":1}', { contentType: 'text/plain' }));
    expect(post('{"a":1}', { contentType: 'application/vnd.api+json' })).toBe(post('{ "a":1}'));
  });

  it('is stable across versions: these inputs hash to the values stored records already carry', () => {
    // A changed fingerprint turns every retry of a stored key into a mismatch; this pins the format.
    const body = json('{"currency":"usd","amount":5e4,"note":"caf\u00e9 \\u00e9"}');
    expect(post('', { query: '?b=2&a=1', body, headers: [['X-Api-Version', '2']] })).toBe(
      'c1f083cae4cd1983eec0826471583eace69b955058e50fa48457fc8d2e4b9a17',
    );
    expect(post('a=1&b=2', { path: '/v1/uploads', contentType: 'text/plain' })).toBe(
      '1fda7fa86e5f3bf1ab50eaf4eebe454025e5a2163d68e174ae3743e84cb095cf',
    );
  });

  it('compares in constant time and only equal strings match', () => {
    const a = post('{"a":1}');
    expect(fingerprintsEqual(a, a)).toBe(true);
    expect(fingerprintsEqual(a, post('{"a":2}'))).toBe(false);
    expect(fingerprintsEqual(a, a.slice(1))).toBe(false);
  });
});
