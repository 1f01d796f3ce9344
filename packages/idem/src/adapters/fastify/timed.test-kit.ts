/**
 * @module For the Fastify plugin's time tests (not part of the library): an app on a real port behind the plugin,
 * on a memory store, with a `post` that reports a dropped connection as null, and a `record` to read the key.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency } from './index.js';

const apps: FastifyInstance[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

export async function served(options: { connectionTimeout?: number; leaseMs?: number; maxHoldMs?: number }) {
  const store = memoryStore();
  const { connectionTimeout = 0, ...engine } = options;
  const app = Fastify({ forceCloseConnections: true, connectionTimeout });
  apps.push(app);
  const plugin = idempotency<undefined>({ store, ttlMs: 86_400_000, scope: 'single-tenant', ...engine });
  await app.register(plugin);
  const post = async (key: string) => {
    if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };
    const response = await fetch(`http://127.0.0.1:${port}/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: '{}',
    }).catch(() => null);
    return response && { status: response.status, body: await response.text() };
  };
  const record = async (key: string) => {
    const kept = await store.get(recordPk('single-tenant', key));
    return kept && { status: kept.status, retryable: kept.retryable, response: kept.response?.status ?? null };
  };
  return { app, post, record, engine: plugin.engine };
}
