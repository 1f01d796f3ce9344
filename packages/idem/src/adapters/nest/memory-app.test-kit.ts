/** A Nest app for the adapter's own tests: `controllers` behind IdempotencyModule on a memory store, on either platform. */
import { Module, type INestApplication, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { memoryStore } from '../../stores/memory/index.js';
import { IdempotencyModule } from './index.js';

const DAY = 86_400_000;

/** Single tenant, a day's TTL, errors not logged; `leaseMs` as given. Not listening yet. */
export async function memoryNestApp(
  platform: 'express' | 'fastify',
  controllers: Type[],
  { leaseMs }: { leaseMs?: number } = {},
): Promise<{ app: INestApplication; store: ReturnType<typeof memoryStore> }> {
  const store = memoryStore();
  class AppModule {}
  Module({
    imports: [
      IdempotencyModule.forRoot({
        store,
        scope: 'single-tenant',
        ttlMs: DAY,
        ...(leaseMs === undefined ? {} : { leaseMs }),
        onError: () => {},
      }),
    ],
    controllers,
  })(AppModule);
  const app =
    platform === 'express'
      ? await NestFactory.create(AppModule, { rawBody: true, logger: false })
      : await NestFactory.create(AppModule, new FastifyAdapter({ forceCloseConnections: true }), {
          rawBody: true,
          logger: false,
        });
  return { app, store };
}
