/**
 * Which stores take a route's `effects`: `acceptsEffects: false` on Redis, DynamoDB and Durable Objects (no
 * transaction holds them with the record), kept through the `sealed()` and `closingWith` wrappers, so
 * `declare({ effects })` throws at once on them and passes on the stores that commit effects (memory here; the SQL
 * stores in their effects tests). The Redis and workerd tests run it through a request.
 */
import { describe, expect, it } from 'vitest';
import { sealed } from '../core/sealed.js';
import { durableObjectsStore } from '../stores/durable-objects/index.js';
import { dynamodbStore, type DynamoDBClientLike } from '../stores/dynamodb/index.js';
import { memoryStore } from '../stores/memory/index.js';
import { closingWith } from '../testing/fixtures.js';
import { admitDeclaration } from './declaration.js';

const namespace = { idFromName: (name: string) => name, get: () => ({ fetch: async () => new Response('null') }) };
const client: DynamoDBClientLike = { send: async () => ({}) } as never;
const keys = [{ id: 'k1', key: new Uint8Array(32) }];
const effects = () => undefined;

describe('declare({ effects }) by store', () => {
  it('refused at once where the store cannot run them, wrapped or not; passed through elsewhere', async () => {
    const refusing = [durableObjectsStore({ namespace }), dynamodbStore({ client, table: 'idem' })];
    const wrapped = refusing.flatMap((store) => [sealed(store, { keys }), closingWith(store, async () => {})]);
    expect([...refusing, ...wrapped].map((store) => store.acceptsEffects)).toEqual(Array(6).fill(false));
    expect(() => admitDeclaration(wrapped[2] as never, { effects })).toThrow(
      'Expected `effects` to be absent with the dynamodb store: it has no transaction to commit them with the record (key the work’s own write on the record id instead).',
    );
    const memory = memoryStore();
    expect([memory.acceptsEffects, sealed(memory, { keys }).acceptsEffects]).toEqual([undefined, undefined]);
    const declaration = { effects, resultId: 'ch_1' };
    expect(admitDeclaration(memory, declaration)).toBe(declaration);
    expect(admitDeclaration(refusing[0] as never, { resultId: 'ch_1' })).toEqual({ resultId: 'ch_1' });
    await Promise.all([...refusing, memory].map((store) => store.close()));
  });
});
