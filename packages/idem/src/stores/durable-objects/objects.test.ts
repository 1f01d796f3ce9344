/**
 * Which object holds a key: the scope's part of the record key (escaped, so a `#` in a scope cannot reach another
 * scope's object), after `prefix` and a `#`, with the key's shard when there are several; the same name every time.
 */
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { RoundTrip } from '../contract.js';
import { durableObjectsStore } from './index.js';

const namespace = {
  idFromName: (name: string) => name,
  get: () => ({ fetch: async () => new Response('null') }),
};

describe('durable-objects store: object names', () => {
  it('one object per scope by default, after the prefix; a # in a scope stays escaped', () => {
    const store = durableObjectsStore({ namespace });
    expect(store.objectOf(recordPk('acct_1', 'k1'))).toBe('#acct_1');
    expect(store.objectOf(recordPk('acct_1', 'k2#x'))).toBe('#acct_1');
    expect(store.objectOf(recordPk('a#b', 'k'))).toBe('#a%23b');
    expect(durableObjectsStore({ namespace, prefix: 'prod:' }).objectOf(recordPk('acct_1', 'k1'))).toBe('prod:#acct_1');
  });

  it('with shards, a scope’s keys spread over exactly that many objects, each key always to the same one', () => {
    const store = durableObjectsStore({ namespace, shards: 4 });
    const keys = Array.from({ length: 200 }, (_, i) => `key-${i}`);
    const names = keys.map((key) => store.objectOf(recordPk('acct_1', key)));
    expect([...new Set(names)].sort()).toEqual(['#acct_1#0', '#acct_1#1', '#acct_1#2', '#acct_1#3']);
    expect(keys.map((key) => store.objectOf(recordPk('acct_1', key)))).toEqual(names);
    // 32-bit FNV-1a of the key (key-0: 0x58e035d9), modulo 4: fixed, so every isolate agrees.
    expect(names.slice(0, 4)).toEqual(['#acct_1#1', '#acct_1#2', '#acct_1#3', '#acct_1#0']);
  });

  it('refuses a record key it cannot route, and options of the wrong kind', () => {
    const store = durableObjectsStore({ namespace });
    expect(() => store.objectOf('acct_1:k1')).toThrow(/Expected `pk` to be IDEMPOTENCY#<scope>#<key>/);
    expect(() => durableObjectsStore({ namespace, shards: 0 })).toThrow(/Expected `shards` to be a positive integer/);
    expect(() => durableObjectsStore({ namespace: {} as never })).toThrow(/Expected `namespace`/);
  });

  it('counts each call as one round trip, shows it to onRoundTrip, and rejects on an error answer', async () => {
    const trips: RoundTrip[] = [];
    const sent: string[] = [];
    const answering = (status: number, body: unknown) => ({
      idFromName: (name: string) => name,
      get: (id: unknown) => ({
        fetch: async (request: Request) => {
          sent.push(`${String(id)} ${request.method} ${request.url}`);
          return new Response(JSON.stringify(body), { status });
        },
      }),
    });
    const store = durableObjectsStore({ namespace: answering(200, { ok: true }), onRoundTrip: (t) => trips.push(t) });
    const pk = recordPk('acct_1', 'k1');
    expect(await store.release({ pk, token: 't' })).toEqual({ ok: true });
    expect(store.roundTrips).toBe(1);
    expect(sent).toEqual(['#acct_1 POST https://idem/release']);
    expect(trips).toEqual([
      { op: 'release', request: { object: '#acct_1', body: { pk, token: 't' } }, response: { ok: true } },
    ]);
    const failing = durableObjectsStore({ namespace: answering(500, { error: 'boom' }) });
    await expect(failing.get(pk)).rejects.toThrow('durable-objects store: get in object #acct_1 failed (500: boom)');
    // No transaction to run the work's writes in: refused before anything is sent.
    const outcome = { status: 'succeeded' as const, retryable: false, resultId: null, response: null };
    const effects = (() => undefined) as never;
    await expect(store.complete({ pk, token: 't', now: 1, outcome, effects })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
    });
    expect(store.roundTrips).toBe(1);
    await store.close();
    await expect(store.get(pk)).rejects.toThrow('durable-objects store is closed');
    expect(store.roundTrips).toBe(1);
  });
});
