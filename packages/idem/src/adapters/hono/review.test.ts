/**
 * A timeout around the handler whose answer is not a 504: `timeout(ms, new HTTPException(503))`, or an `onError`
 * that turns every error into a 500. The handler still runs when that answer is given, so the key is abandoned (held
 * until its lease lapses), never recorded retryable. Executions are counted, and so are the ones at once.
 */
import type { ErrorHandler } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { describe, it } from 'vitest';
import { timesOutOnce } from './timed.test-kit.js';

const catchAll: ErrorHandler = (_error, c) => c.json({ error: 'internal' }, 500);
const cases = [
  ['inside', 'HTTPException(503)', { exception: new HTTPException(503, { message: 'busy' }) }, 503, 'busy'],
  ['outside', 'HTTPException(503)', { exception: new HTTPException(503, { message: 'busy' }) }, 503, 'busy'],
  ['inside', 'a catch-all onError 500', { onError: catchAll }, 500, '{"error":"internal"}'],
  ['outside', 'a catch-all onError 500', { onError: catchAll }, 500, '{"error":"internal"}'],
] as const;

describe('idem/hono: a timeout answered with another status while the handler runs', () => {
  it.each(cases)('mounted %s, %s: 409 while the work runs, then one run at a time', (where, _what, how, status, body) =>
    timesOutOnce(where, how, { status, body }),
  );
});
