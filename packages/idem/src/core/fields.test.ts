import { describe, expect, it } from 'vitest';
import { selectFields } from './fields.js';

describe('selectFields', () => {
  it('excludes top-level and nested members, keeping the rest as raw text', () => {
    const body =
      '{ "amount": 12345678901234567891, "ts": "2026-12-01T00:00:00Z", "meta": {"trace": "t-1", "order": 7} }';
    expect(selectFields(body, { exclude: ['ts', 'meta.trace'] })).toBe(
      '{"amount":12345678901234567891,"meta":{"order":7}}',
    );
  });

  it('includes only the chosen members; a nested include keeps its parent with that member alone', () => {
    const body = '{"amount":500,"currency":"usd","meta":{"trace":"t","order":7},"note":"hi"}';
    expect(selectFields(body, { include: ['amount', 'meta.order'] })).toBe('{"amount":500,"meta":{"order":7}}');
    expect(selectFields(body, { include: ['missing'] })).toBe('{}');
  });

  it('handles strings with escapes, arrays and keys that need decoding', () => {
    const body = '{"a\\u0062":[1,{"x":"}"}],"s":"quote \\" and , comma","drop":[["]"]]}';
    expect(selectFields(body, { exclude: ['drop'] })).toBe('{"a\\u0062":[1,{"x":"}"}],"s":"quote \\" and , comma"}');
    expect(selectFields(body, { include: ['ab'] })).toBe('{"a\\u0062":[1,{"x":"}"}]}');
  });

  it('keeps a duplicate on the way to an included path when it is not an object, so the last member still wins', () => {
    // JSON.parse gives meta: "gone"; dropping the string would leave the earlier object to win instead.
    expect(selectFields('{"meta":{"a":1},"meta":"gone"}', { include: ['meta.a'] })).toBe(
      '{"meta":{"a":1},"meta":"gone"}',
    );
  });

  it('returns a non-object body unchanged and invalid JSON as undefined', () => {
    expect(selectFields('[1,2]', { exclude: ['a'] })).toBe('[1,2]');
    expect(selectFields('{"a":1', { exclude: ['a'] })).toBeUndefined();
    expect(selectFields('{"a":1} x', { exclude: ['a'] })).toBeUndefined();
  });
});
