import { describe, expect, it } from 'vitest';
import { replayParts, replayResponse } from './replay.js';

/** A deterministic sequence of header lists: names drawn from a small pool (repeats included), in shuffled orders. */
function headerLists(count: number): Array<Array<[string, string]>> {
  const names = ['location', 'content-type', 'vary', 'etag', 'link', 'cache-control', 'a', 'zz', 'idempotent-replayed'];
  let seed = 7;
  const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648);
  return Array.from({ length: count }, (_, i) =>
    Array.from({ length: i % 9 }, (_, j) => [names[next() % names.length] as string, `v${j}`] as [string, string]),
  );
}

describe('replayParts: the headers a replay Response would carry, built without one', () => {
  it('the same pairs in the same order as the Headers object, for 200 lists of 0 to 8 headers, repeats included', () => {
    const lists = headerLists(200);
    const mismatched = lists.filter((headers) => {
      const stored = { status: 201, headers, body: new Uint8Array([1]) };
      return JSON.stringify(replayParts(stored).headers) !== JSON.stringify([...replayResponse(stored).headers]);
    });
    expect([lists.length, mismatched]).toEqual([200, []]);
  });

  it('names out of order come back sorted, the marker among them', () => {
    const stored = {
      status: 201,
      headers: [
        ['vary', 'x'],
        ['location', '/c/1'],
        ['content-type', 'application/json'],
        ['link', '<a>'],
      ] as Array<[string, string]>,
      body: new Uint8Array([1]),
    };
    expect(replayParts(stored).headers.map(([name]) => name)).toEqual([
      'content-type',
      'idempotent-replayed',
      'link',
      'location',
      'vary',
    ]);
  });
});
