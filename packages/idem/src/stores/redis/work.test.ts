/**
 * What a new key costs Redis, read off `MONITOR` (the scripts' own `redis.call`s included): the claim's read, its
 * write and its index entry, the completion's read and write, nothing else. And the index's expiry, which only
 * an earlier version gave it: `list` and `sweep` take it away.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { REDIS_URL } from '#test/services.js';
import { admin, available, claimRequest, closing, indexKey, ioredis, isolated, scope } from '#test/fixtures/redis.js';
import { T0, TTL, waitFor } from '../../testing/fixtures.js';
import type { Outcome } from '../contract.js';

const outcome: Outcome = {
  status: 'succeeded',
  retryable: false,
  resultId: 'ch_1',
  response: { status: 201, headers: [['content-type', 'application/json']], body: new Uint8Array([0x7b, 0x7d]) },
};

describe.skipIf(!available)('redis store: the work of a new key', () => {
  it('a new key is EVALSHA claim (HMGET, HSET, PEXPIRE, ZADD), then EVALSHA complete (HMGET, HSET)', () =>
    closing(isolated(ioredis), async (store) => {
      // Every command the server runs, scripts' own included (MONITOR shows those with source "lua").
      const seen: Array<{ command: string; source: string; args: string[] }> = [];
      const monitor = await new Redis(REDIS_URL).monitor();
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        if (args.some((arg) => arg.startsWith(store.prefix) || arg.startsWith('sentinel-')))
          seen.push({ command: (args[0] as string).toUpperCase(), source, args });
      });
      const sentinel = `sentinel-${randomUUID()}`;
      try {
        const req = claimRequest();
        expect((await store.claim(req)).kind).toBe('claimed');
        expect(await store.complete({ pk: req.pk, token: req.token, now: T0 + 1, outcome })).toEqual({ ok: true });
        // MONITOR delivers in order: once the sentinel arrives, everything before it has.
        await admin.echo(sentinel);
        await waitFor('the sentinel on MONITOR', () => seen.some(({ args }) => args[1] === sentinel));
      } finally {
        monitor.disconnect();
      }
      const commands = seen
        .filter(({ args }) => args[1] !== sentinel)
        .map(({ command, source }) => (source === 'lua' ? `  ${command}` : command));
      expect(commands).toEqual(['EVALSHA', '  HMGET', '  HSET', '  PEXPIRE', '  ZADD', 'EVALSHA', '  HMGET', '  HSET']);
    }));

  it('an index an earlier version gave an expiry loses it when list or sweep meets it', () =>
    closing(isolated(ioredis), async (store) => {
      const index = indexKey(store, scope);
      const req = claimRequest();
      await store.claim(req);
      expect(await admin.pttl(index)).toBe(-1);
      // As the earlier claim script left it: the index expiring with the record it names.
      expect(await admin.pexpire(index, TTL)).toBe(1);
      expect((await store.list({ scope, limit: 10 })).map((r) => r.key)).toEqual([req.key]);
      expect(await admin.pttl(index)).toBe(-1);
      expect(await admin.pexpire(index, TTL)).toBe(1);
      expect(await store.sweep({ now: T0 + 1 })).toBe(0);
      expect(await admin.pttl(index)).toBe(-1);
      expect(await admin.zrange(index, '0', '-1')).toEqual([req.key]);
    }));
});
