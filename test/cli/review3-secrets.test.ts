/**
 * The third security review's leaks (rev30), each the exact line printed (the URL forms are in
 * packages/idem/src/core/store-url.test.ts): a credential parameter whose name is
 * percent-encoded (pg and ioredis read `p%61ssword` as `password`), an http(s) password holding `#`, a credential
 * value running past a `#`, a malformed `-H` echoing its token, and a store error quoting 64 KB (whose redaction
 * was quadratic: 23 s for 64 K characters) printed whole.
 */
import { describe, expect, it } from 'vitest';
import { redact } from '../../packages/idem/src/core/store-url.js';
import { inProcess } from './helpers.js';

describe('redaction: the third review', () => {
  it('masks the value of a percent-encoded credential name wherever a driver echoes it', () => {
    const url = 'postgres://u@h/db?p%61ssword=S3CRETPW1';
    expect(redact(`connect failed for ${url}: auth S3CRETPW1 refused`, url)).toBe(
      'connect failed for postgres://u@h/db?p%61ssword=*** auth *** refused',
    );
  });

  it('redacts 256 K characters of credential-like words in one pass (quadratic: minutes before)', () => {
    const text = `redis record x has an unknown status ${'pass'.repeat(65_536)} password=S3CRET`;
    expect(redact(text)).toBe(`redis record x has an unknown status ${'pass'.repeat(65_536)} password=***`);
  }, 10_000);

  // An Authorization header is masked to the end of its line, whatever its scheme (review rev42: `Negotiate …` kept
  // its tail when only known schemes were taken), so the word after the token goes too: over-masked, never leaked.
  it('masks a credential value whole: with its auth scheme, or in ODBC braces (rev31)', () => {
    expect([
      redact('Authorization: Bearer sk_live_51Hx rejected'),
      redact('Driver={x};Server=h;Pwd={S3;CRETPW};Uid=a'),
      redact('authorization=Basic dXNlcjpwYXNz&x=1'),
    ]).toEqual(['Authorization: ***', 'Driver={x};Server=h;Pwd=***;Uid=a', 'authorization=***&x=1']);
  });

  it('redacts 256 K characters of schemes, each run scanned once (rev31: 26 s before)', () => {
    const text = `status ${'a://'.repeat(65_536)} postgres://app:S3CRET@db/pay`;
    expect(redact(text)).toBe(`status ${'a://'.repeat(65_536)} postgres://app:***@db/pay`);
  }, 10_000);
});

describe('the CLI prints no credential and no unbounded line', () => {
  it('a malformed -H is not echoed', async () => {
    const { code, stderr } = await inProcess([
      'probe',
      'http://127.0.0.1:9/x',
      '-H',
      'Authorization Bearer sk_live_51HxSECRETTOKEN',
    ]);
    expect([code, stderr.split('\n')[0]]).toEqual([
      2,
      'idem probe: --header must look like "Name: value" (a header name, a colon, the value); the 44 characters given do not (not shown: they may hold a credential).',
    ]);
  });

  it('an error line is cut at 1,000 characters', async () => {
    const { code, stderr } = await inProcess(['migrate', '--store', `ftp://${'x'.repeat(5_000)}`]);
    // The message quotes the 5,006-character URL: 1,000 characters of it are shown, and how many more there were.
    const cut = /^idem migrate: (--store must be one of .*)… \((\d+) more characters\)$/.exec(
      stderr.split('\n')[0] ?? '',
    );
    expect([code, cut?.[1]?.length, cut?.[1]?.includes('ftp://xxx'), Number(cut?.[2])]).toEqual([
      2,
      1_000,
      true,
      4_365,
    ]);
  });
});
