/**
 * `prefix` keeps stores sharing a namespace apart: an object's name is `<prefix>#<scope>` (+ `#<shard>`), with no
 * `#` in either part, so two stores of different (prefix, shards) never address the same object for any scope.
 * Before, the name was `<prefix><scope>`: prefix `env` with 2 shards and prefix `env1#` with 1 shard, scope `1`,
 * shared an object, and the second store's first request replayed the first store's answer.
 */
import { describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import { durableObjectsStore } from './index.js';

const namespace = {
  idFromName: (name: string) => name,
  get: () => ({ fetch: async () => new Response('null') }),
};

describe('durable-objects store: prefixes', () => {
  it('stores of different prefix or shards never share an object', () => {
    const stores = [
      { prefix: '', shards: 1 },
      { prefix: '', shards: 2 },
      { prefix: 'env', shards: 1 },
      { prefix: 'env', shards: 2 },
      { prefix: 'env1', shards: 1 },
      { prefix: 'env1', shards: 2 },
      { prefix: '1', shards: 1 },
    ].map((options) => durableObjectsStore({ namespace, ...options }));
    const scopes = ['1', '1x', 'x', 'env1', '0', '1#0', '#', ''];
    const keys = Array.from({ length: 16 }, (_, i) => `k${i}`);
    const owners = new Map<string, Set<number>>();
    stores.forEach((store, i) => {
      for (const scope of scopes) {
        for (const key of keys) {
          const name = store.objectOf(recordPk(scope, key));
          owners.set(name, (owners.get(name) ?? new Set()).add(i));
        }
      }
    });
    expect([...owners].filter(([, by]) => by.size > 1).map(([name]) => name)).toEqual([]);
    // 4 single-object stores, 3 of 2 shards: every (store, scope, shard) its own object.
    expect(owners.size).toBe(4 * scopes.length + 3 * 2 * scopes.length);
  });

  it('the reported pairs: env/2 shards vs env1#… refused; env + 1x vs env1 + x', () => {
    const x = durableObjectsStore({ namespace, prefix: 'env', shards: 2 });
    expect(['k1', 'k2'].map((k) => x.objectOf(recordPk('1', k)))).toEqual(['env#1#1', 'env#1#0']);
    expect(() => durableObjectsStore({ namespace, prefix: 'env1#' })).toThrow(
      'Expected `prefix` to be a string without `#` (the separator of object names), got "env1#".',
    );
    expect(durableObjectsStore({ namespace, prefix: 'env' }).objectOf(recordPk('1x', 'k'))).toBe('env#1x');
    expect(durableObjectsStore({ namespace, prefix: 'env1' }).objectOf(recordPk('x', 'k'))).toBe('env1#x');
  });
});
