import { describe, expect, it } from 'vitest';
import { canonicalForm } from './canonical-form.js';
import { fingerprint } from './fingerprint.js';

const utf8 = (text: string) => new TextEncoder().encode(text);
const canonical = (body: string): string => {
  const bytes = canonicalForm(utf8(body));
  return bytes === undefined ? 'as sent' : new TextDecoder().decode(bytes);
};
const form = (body: string) =>
  fingerprint({ method: 'POST', path: '/p', contentType: 'application/x-www-form-urlencoded', body: utf8(body) });

describe('a form body grouped by root name, as qs (Express urlencoded extended) reads it', () => {
  it('keeps the sent order of `a`, `a[]`, `a[0]`, `a[b]`, `a.b`: qs reads them as one field', () => {
    // qs: ["1","2"] vs ["2","1"]; ["1",{"b":"2"}] vs [{"b":"2"},"1"]; ["x","y"] vs ["y","x"].
    const pairs: Array<[string, string]> = [
      ['a=1&a[]=2', 'a[]=2&a=1'],
      ['a=1&a[b]=2', 'a[b]=2&a=1'],
      ['a[0]=x&a=y', 'a=y&a[0]=x'],
      ['a.b=1&a=2', 'a=2&a.b=1'],
      ['a=1&a%5B%5D=2', 'a%5B%5D=2&a=1'],
    ];
    for (const [x, y] of pairs) {
      expect([x, y, form(x) === form(y)]).toEqual([x, y, false]);
    }
  });

  it('sorts the groups by root and keeps the order within each', () => {
    expect(canonical('b=2&a[]=2&a=1')).toBe('a[]=2&a=1&b=2');
    expect(canonical('b=2&a=1&a[]=2')).toBe('a=1&a[]=2&b=2');
    expect(canonical('c.x=1&b=2&c=3&a[k]=4')).toBe('a[k]=4&b=2&c.x=1&c=3');
    expect(form('b=2&a[]=2&a=1')).toBe(form('a[]=2&a=1&b=2'));
    expect(form('a=1&b=2')).toBe(form('b=2&a=1'));
  });

  it('fingerprints as sent a name that starts with `[` or `.` (qs reads `[a]` as `a`)', () => {
    expect(canonical('b=1&[a]=2&a=1')).toBe('as sent');
    expect(canonical('b=1&.a=2')).toBe('as sent');
    expect(form('a=1&[a]=2')).not.toBe(form('[a]=2&a=1'));
  });

  it('leaves as sent a body in the order before grouping (sorted by whole name): its old fingerprint holds', () => {
    // `a!` < `a[x]` by whole name, though the root `a!` sorts after the root `a`.
    expect(canonical('a!=1&a[x]=2')).toBe('as sent');
    expect(canonical('a=1&a[]=2&b=3')).toBe('as sent');
    expect(canonical('a[]=2&a=1&b=3')).toBe('as sent');
  });
});
