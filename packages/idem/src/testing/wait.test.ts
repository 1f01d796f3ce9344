import { describe, expect, it } from 'vitest';
import { waitFor } from './fixtures.js';

describe('waitFor', () => {
  it('returns the first answer other than undefined or false, after as many polls as it took', async () => {
    let polls = 0;
    const answers = [undefined, false, 0, 'late'];
    expect(await waitFor('the third poll', () => answers[polls++], { everyMs: 1 })).toBe(0);
    expect(polls).toBe(3);
  });

  it('throws after timeoutMs, naming what it waited for; a function is asked then, for what it saw last', async () => {
    let seen = 0;
    await expect(waitFor('a record in_progress', () => false, { timeoutMs: 30, everyMs: 5 })).rejects.toThrow(
      new Error('timed out after 30 ms waiting for a record in_progress'),
    );
    const failed = await waitFor(
      () => `seen to reach 1000, still ${seen}`,
      () => ++seen >= 1000 && seen,
      { timeoutMs: 30, everyMs: 5 },
    ).catch((error: unknown) => error);
    expect([failed, seen > 1]).toEqual([
      new Error(`timed out after 30 ms waiting for seen to reach 1000, still ${seen}`),
      true,
    ]);
  });

  it('an error from check ends the wait at once, unless retryOnError: then it is "not yet", named at the timeout', async () => {
    let calls = 0;
    const refused = () => {
      calls++;
      throw new Error('connect ECONNREFUSED');
    };
    await expect(waitFor('a server', refused, { timeoutMs: 10_000 })).rejects.toThrow(
      new Error('connect ECONNREFUSED'),
    );
    expect(calls).toBe(1);
    await expect(waitFor('a server', refused, { timeoutMs: 30, everyMs: 5, retryOnError: true })).rejects.toThrow(
      new Error('timed out after 30 ms waiting for a server (last error: connect ECONNREFUSED)'),
    );
    expect(calls).toBeGreaterThan(2);
    let up = false;
    const starting = () => {
      if (!up) {
        up = true;
        throw new Error('connect ECONNREFUSED');
      }
      return 'up';
    };
    expect(await waitFor('a server', starting, { everyMs: 1, retryOnError: true })).toBe('up');
  });
});
