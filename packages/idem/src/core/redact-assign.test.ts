/**
 * Credentials written as hash-dump or assignment pairs (`=>`, `:=`, Ruby's `:password =>`), and a URL of thousands
 * of credential parameters (the third review of issue 30): masked whole.
 */
import { describe, expect, it } from 'vitest';
import { redact, redactUrl } from './store-url.js';

describe('redact: assignment forms', () => {
  it('masks the value after =>, := and a Ruby symbol name', () => {
    const texts = ['password => S3CRET', '"password" => "S3CRET"', ":password => 'S3CRET'", 'password := S3CRET'];
    expect([...texts, '{:api_key=>"S3CRET"}'].map((text) => redact(text))).toEqual([
      'password => ***',
      '"password" => "***"',
      ":password => '***'",
      'password := ***',
      '{:api_key=>"***"}',
    ]);
  });
});

describe('redactUrl: many credential parameters', () => {
  it('17,500 password= parameters (297 K characters): every value in the URL masked; echoed, the 64 longest', () => {
    const values = Array.from({ length: 17_500 }, (_, i) => `S${String(i).padStart(6, '0')}`);
    const url = `redis://h:6379/0?${values.map((v) => `password=${v}`).join('&')}`;
    expect(redactUrl(url)).toBe(`redis://h:6379/0?${values.map(() => 'password=***').join('&')}`);
    expect(redact(`AUTH ${values[0]} failed`, url)).toBe('AUTH *** failed');
    // Past 64 the URL's own secrets are not searched for elsewhere (each search is a pass over the text): a driver
    // echoing the 17,500th alone is printed. The limit that keeps printing such a URL linear.
    expect(redact(`AUTH ${values[17_499]} failed`, url)).toBe('AUTH S017499 failed');
  });
});
