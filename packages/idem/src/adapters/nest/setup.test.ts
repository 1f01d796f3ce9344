/**
 * `idem/nest` in the app around it: the `rawBody: true` the module needs, a bad per-route option failing the app
 * at start, and Fastify's send pipeline run once per request while Idem holds the reply.
 */
import { randomUUID } from 'node:crypto';
import { Controller, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { describe, expect, it } from 'vitest';
import { route, Work } from './app.test-kit.js';
import { Idempotent } from './index.js';
import { available, newRef, useNestApps } from './serve.test-kit.js';

describe.skipIf(!available)('idem/nest', () => {
  const { start, appModule } = useNestApps();

  it.each(['express', 'fastify'] as const)(
    'without rawBody: true a keyed request is refused with 500, and onError says why (%s)',
    async (platform) => {
      const served = await start(platform, { rawBody: false });
      try {
        const ref = newRef();
        const answer = await served.post('/v1/charges', { ref, amount: 500 }, { 'idempotency-key': randomUUID() });
        expect([answer.status, answer.problem, served.work.runs.get(ref)]).toEqual([
          500,
          'urn:idem:problem:internal-error',
          undefined,
        ]);
        expect(served.errors.map((error) => (error as Error).message)).toEqual([
          expect.stringContaining('{ rawBody: true }'),
        ]);
      } finally {
        await served.close();
      }
    },
  );

  it('Fastify runs its send pipeline once per request while Idem holds the reply', async () => {
    const sends = new Map<string, number>();
    const served = await start('fastify', { sends });
    try {
      const key = randomUUID();
      const first = await served.post(
        '/v1/charges',
        { ref: 'r1', amount: 500 },
        { 'idempotency-key': key, 'x-ref': 'first' },
      );
      const retry = await served.post(
        '/v1/charges',
        { ref: 'r1', amount: 500 },
        { 'idempotency-key': key, 'x-ref': 'replay' },
      );
      // A route answering through @Res() sends without Nest awaiting it: Fastify must still see it as sent.
      const rawKey = randomUUID();
      const raw = await served.post('/v1/raw', { ref: 'r2', amount: 1 }, { 'idempotency-key': rawKey, 'x-ref': 'raw' });
      // Its replay is written to the Node response directly (Nest sends nothing for such a route), past onSend.
      const rawRetry = await served.post(
        '/v1/raw',
        { ref: 'r2', amount: 1 },
        { 'idempotency-key': rawKey, 'x-ref': 'raw-replay' },
      );
      expect([
        first.status,
        retry.headers.get('idempotent-replayed'),
        raw.status,
        rawRetry.headers.get('idempotent-replayed'),
      ]).toEqual([201, 'true', 201, 'true']);
      expect(Object.fromEntries(sends)).toEqual({ first: 1, replay: 1, raw: 1 });
    } finally {
      await served.close();
    }
  });

  it('a bad per-route option fails the app at start, naming the option', async () => {
    class BadController {
      create(): object {
        return {};
      }
    }
    Controller('bad')(BadController);
    route(BadController, 'create', [Post(), Idempotent({ mismatchStatus: 418 as 400 })]);
    const AppModule = appModule(new Work(), [], { controllers: [BadController] });
    const app = await NestFactory.create(AppModule, { logger: false });
    try {
      await expect(app.init()).rejects.toThrow('Expected `mismatchStatus` to be 400 or 422, got 418.');
    } finally {
      await app.close();
    }
  });
});
