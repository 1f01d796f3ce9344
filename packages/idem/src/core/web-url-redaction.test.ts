/**
 * http(s) URLs (the probe's target and its count URL) as they may be printed: the whole user info (an API key is
 * often the user name), and every credential parameter of the query and the fragment, masked exactly.
 */
import { describe, expect, it } from 'vitest';
import { redact, redactUrl } from './store-url.js';

/** A URL as given, then as printed. */
const SHOWN = `
http://user:Zq9Secret@127.0.0.1:1/v1/charges          http://***@127.0.0.1:1/v1/charges
https://sk_live_Zq9Secret:@api.example/v1/charges     https://***@api.example/v1/charges
https://sk_live_Zq9Secret@api.example/v1              https://***@api.example/v1
http://127.0.0.1:1/v1/charges?api_key=Zq9Secret       http://127.0.0.1:1/v1/charges?api_key=***
http://u:Zq9Secret@127.0.0.1:1/b?token=Zq9Secret      http://***@127.0.0.1:1/b?token=***
https://h/x?password=a&apikey=b&secret=c&signature=d&auth=e&access_token=f&page=2   https://h/x?password=***&apikey=***&secret=***&signature=***&auth=***&access_token=***&page=2
https://h/x?X-Amz-Signature=abcdef&X-Amz-Credential=AKIA/x&a=b   https://h/x?X-Amz-Signature=***&X-Amz-Credential=***&a=b
https://h/cb#access_token=Zq9Secret&state=xyz&token_type=bearer   https://h/cb#access_token=***&state=xyz&token_type=***
https://h/p?token=Zq9Secret#top                       https://h/p?token=***#top
http://127.0.0.1:4000/v1/charges?limit=3              http://127.0.0.1:4000/v1/charges?limit=3
http://user:p@ss/word@h/x                             http://…
`;

describe('redactUrl on http(s) URLs', () => {
  it.each(
    SHOWN.trim()
      .split('\n')
      .map((line) => line.split(/\s+/)),
  )('%s → %s', (url, shown) => {
    expect(redactUrl(url)).toBe(shown);
  });

  it('redact(text, url) masks the user name of an http(s) URL wherever a message repeats it', () => {
    const url = 'https://sk_live_Zq9Secret:@api.example/v1';
    expect(redact('401 for sk_live_Zq9Secret at https://sk_live_Zq9Secret:@api.example/v1', url)).toBe(
      '401 for *** at https://***:***@api.example/v1',
    );
  });
});
