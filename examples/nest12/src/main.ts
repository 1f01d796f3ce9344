// #region main
// main.ts — NestJS 12 (ESM): top-level await, and relative imports end in .js.
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

const app = await NestFactory.create(AppModule, { rawBody: true }); // rawBody is required: see below
await app.listen(process.env.PORT ?? 3000);
console.log(`listening on ${await app.getUrl()}`);

// Fastify: NestFactory.create<NestFastifyApplication>(AppModule, new FastifyAdapter(), { rawBody: true })
// #endregion main
