import { describe, expect, it } from 'vitest';
import { isIdempotencyError } from './errors.js';
import { parseKey, recordPk } from './key.js';

const code = (raw: string) => {
  try {
    parseKey(raw);
    return 'ok';
  } catch (error) {
    return isIdempotencyError(error) ? error.code : 'other';
  }
};

describe('parseKey', () => {
  it('accepts a bare token and unquotes an sf-string with escapes', () => {
    expect(parseKey('8e03978e-40d5-43e8-bc93-6894a57f9324')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(parseKey('"abc"')).toBe('abc');
    expect(parseKey('"a\\"b\\\\c"')).toBe('a"b\\c');
    expect(parseKey('~!#$%&*')).toBe('~!#$%&*');
  });

  it('rejects empty, too long, non-visible and badly quoted keys with KEY_INVALID', () => {
    expect(code('')).toBe('KEY_INVALID');
    expect(code('""')).toBe('KEY_INVALID');
    expect(code('a'.repeat(255))).toBe('ok');
    expect(code('a'.repeat(256))).toBe('KEY_INVALID');
    expect(code('a b')).toBe('KEY_INVALID');
    expect(code('k1, k2')).toBe('KEY_INVALID');
    expect(code('tab\there')).toBe('KEY_INVALID');
    expect(code('\u0000')).toBe('KEY_INVALID');
    expect(code('ключ')).toBe('KEY_INVALID');
    expect(code('"a\\nb"')).toBe('KEY_INVALID');
    expect(code('"a"b"')).toBe('KEY_INVALID');
    expect(code('"abc\\"')).toBe('KEY_INVALID');
    expect(code('"abc')).toBe('KEY_INVALID');
    expect(code('ab"c')).toBe('KEY_INVALID');
  });

  it('says what is wrong', () => {
    expect(() => parseKey('a'.repeat(300))).toThrow('The Idempotency-Key is 300 characters long (at most 255).');
  });
});

describe('recordPk', () => {
  it('builds IDEMPOTENCY#<scope>#<key> and cannot confuse scopes containing #', () => {
    expect(recordPk('acct_alice', 'k1')).toBe('IDEMPOTENCY#acct_alice#k1');
    expect(recordPk('a#b', 'c')).not.toBe(recordPk('a', 'b#c'));
    expect(recordPk('a#b', 'c')).toBe('IDEMPOTENCY#a%23b#c');
  });
});
