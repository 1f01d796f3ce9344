import { describe, expect, it } from 'vitest';
import { canonicalForm, isFormType, MAX_FORM_FIELDS } from './canonical-form.js';
import { fingerprint } from './fingerprint.js';

const utf8 = (text: string) => new TextEncoder().encode(text);
/** The canonical text of `body`, or `'as sent'` when the body is fingerprinted as its own bytes. */
const canonical = (body: string | Uint8Array): string => {
  const bytes = canonicalForm(typeof body === 'string' ? utf8(body) : body);
  return bytes === undefined ? 'as sent' : new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes);
};

describe('canonicalForm', () => {
  it('sorts fields by root name; the fields of one root keep their order', () => {
    expect(canonical('currency=usd&amount=500&metadata[order_id]=42')).toBe(
      'amount=500&currency=usd&metadata[order_id]=42',
    );
    expect(canonical('b=2&a=1&a=0&b=1')).toBe('a=1&a=0&b=2&b=1');
    expect(canonical('items[1]=y&z=1&items[0]=x')).toBe('items[1]=y&items[0]=x&z=1');
    expect(canonical('a[]=2&b=1&a[]=1')).toBe('a[]=2&a[]=1&b=1');
  });

  it('leaves a body already in order as sent (no copy), and only such a body', () => {
    for (const body of ['', 'a=1', 'a=1&a=0&b=2', 'amount=500&currency=usd', '=x&a', 'a&a&a']) {
      expect([body, canonical(body)]).toEqual([body, 'as sent']);
    }
    expect(canonical('b=1&a=1')).toBe('a=1&b=1');
  });

  it('drops empty fields, as a form parser does', () => {
    expect(canonical('a=1&&b=2&')).toBe('a=1&b=2');
    expect(canonical('&a=1')).toBe('a=1');
    expect(canonical('&')).toBe('');
  });

  it('compares names decoded (`+`, escapes, UTF-8) but never changes a byte of a field', () => {
    // `%61` is `a`: one name sent twice, so its two values keep their order, whichever way each was written.
    expect(canonical('%61=2&a=1')).toBe('as sent');
    expect(canonical('a=1&%61=2')).toBe('as sent');
    expect(canonical('b=1&%61=2&a=3')).toBe('%61=2&a=3&b=1');
    // `%5B` is a bracket: `metadata%5Bb%5D` has the root `metadata`, and keeps its place among its fields.
    expect(canonical('z=0&metadata%5Bb%5D=2&metadata[a]=1')).toBe('metadata%5Bb%5D=2&metadata[a]=1&z=0');
    // `+` is a space, which sorts before `a`; a value's escapes are never decoded.
    expect(canonical('xa=%41&x+b=B')).toBe('x+b=B&xa=%41');
    expect(canonical('b=%41&a=A')).toBe('a=A&b=%41');
    // `%C3%A9` is é, after every ASCII letter.
    expect(canonical('%C3%A9=1&z=2')).toBe('z=2&%C3%A9=1');
  });

  it('fingerprints as sent a body with a name parsers read differently: a bad escape, escaped non-UTF-8', () => {
    // qs keeps `%FF` and `%FE` as two names; URLSearchParams reads both as '\uFFFD', one name: no order is safe.
    for (const body of ['z=0&%FF=1&%FE=2', 'z=0&%FE=2&%FF=1', 'b=1&a=1&%zz=2', 'b=1&%41%zz=2&a=1']) {
      expect([body, canonical(body)]).toEqual([body, 'as sent']);
    }
  });

  it('fingerprints a body that is not UTF-8 as sent, and keeps a byte order mark', () => {
    expect(canonical(Uint8Array.of(0x62, 0x3d, 0xff, 0x26, 0x61, 0x3d, 0x31))).toBe('as sent');
    expect(canonical('\ufeffb=1&a=2')).toBe('a=2&\ufeffb=1');
  });

  it(`orders at most ${MAX_FORM_FIELDS} fields, empty ones counted: a larger body is fingerprinted as sent`, () => {
    const reversed = (count: number) =>
      Array.from({ length: count }, (_, i) => `f${String(count - i).padStart(4, '0')}=1`).join('&');
    const atLimit = canonical(reversed(MAX_FORM_FIELDS));
    expect(atLimit.split('&').slice(0, 2)).toEqual(['f0001=1', 'f0002=1']);
    expect(canonical(reversed(MAX_FORM_FIELDS + 1))).toBe('as sent');
    expect(canonical(`b=1&a=1${'&'.repeat(MAX_FORM_FIELDS - 2)}`)).toBe('a=1&b=1');
    expect(canonical(`b=1&a=1${'&'.repeat(MAX_FORM_FIELDS - 1)}`)).toBe('as sent');
  });

  it('recognises the form media type in any case, with parameters, and nothing else', () => {
    expect(
      [
        'application/x-www-form-urlencoded',
        'Application/X-WWW-Form-Urlencoded ; charset=UTF-8',
        'application/x-www-form-urlencoded;charset=utf-8',
        'multipart/form-data; boundary=x',
        'application/json',
        'text/plain',
        '',
        null,
        undefined,
      ].map(isFormType),
    ).toEqual([true, true, true, false, false, false, false, false, false]);
  });
});

describe('the fingerprint of a form body', () => {
  const form = (body: string, contentType = 'application/x-www-form-urlencoded; charset=utf-8') =>
    fingerprint({ method: 'POST', path: '/v1/uploads', contentType, body: utf8(body) });

  it("does not depend on the order of fields; a repeated name's order still counts", () => {
    expect(form('currency=usd&amount=500&metadata[order_id]=42')).toBe(
      form('metadata[order_id]=42&amount=500&currency=usd'),
    );
    expect(form('a=1&&b=2&')).toBe(form('b=2&a=1'));
    expect(form('a=1&a=2')).not.toBe(form('a=2&a=1'));
    expect(form('b=2&a=1', 'text/plain')).not.toBe(form('a=1&b=2', 'text/plain'));
  });

  it('is the fingerprint of its canonical bytes: a form sent in order keeps the fingerprint it had before forms were ordered', () => {
    // The pinned raw fingerprint of `a=1&b=2` on /v1/uploads (fingerprint.test.ts, "is stable across versions").
    const pinned = '1fda7fa86e5f3bf1ab50eaf4eebe454025e5a2163d68e174ae3743e84cb095cf';
    expect([form('a=1&b=2'), form('b=2&a=1'), form('a=1&b=2', 'text/plain')]).toEqual([pinned, pinned, pinned]);
  });
});
