/**
 * The adapter conformance suite's harness for `idem/nest`, over the Nest packages it is given: conformance.test.ts
 * runs it on NestJS 11 (the repo's devDependencies, both platforms), test/runtimes/nest.test.ts on NestJS 12 with
 * the built package. The test app is written without decorator syntax (decorators called as functions), so it
 * compiles under the repo's strict tsconfig, which has no `experimentalDecorators`.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import fastifyCompress from '@fastify/compress';
import type * as NestCommon from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import type * as NestCore from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import type Database from 'better-sqlite3';
import compression from 'compression';
import type { IdempotencyStore } from '../../core/record.js';
import type { AdapterHarness, SuiteReply } from '../../testing/adapter.js';
import type * as IdemNest from './index.js';
import type { NestRequest } from './index.js';

/** What the passthrough response offers on both platforms: Express's `res` and Fastify's `reply`. */
interface PlatformResponse {
  status?(code: number): unknown;
  code?(code: number): unknown;
  setHeader?(name: string, value: string): unknown;
  header?(name: string, value: string): unknown;
  end?(value: unknown): unknown;
}

function answer(res: PlatformResponse, status: number, headers: Record<string, string> = {}): void {
  if (res.code) res.code(status);
  else res.status?.(status);
  for (const [name, value] of Object.entries(headers)) {
    if (res.header) res.header(name, value);
    else res.setHeader?.(name, value);
  }
}

/** Applies a method's decorators and its parameters' decorators, as `@Post() create(@Body() body, ...)` would. */
function route(
  type: { prototype: object },
  method: string,
  decorators: MethodDecorator[],
  parameters: ParameterDecorator[],
): void {
  const descriptor = Object.getOwnPropertyDescriptor(type.prototype, method) as PropertyDescriptor;
  for (const decorate of decorators) decorate(type.prototype, method, descriptor);
  parameters.forEach((decorate, index) => decorate(type.prototype, method, index));
}

/** The Nest packages and the `idem/nest` build a harness runs on: NestJS 11 here, NestJS 12 in test/runtimes. */
export interface NestLibraries {
  /** `NestJS 11`, `NestJS 12`: in the suite's name. */
  readonly version: string;
  readonly common: Pick<
    typeof NestCommon,
    'Body' | 'Controller' | 'Module' | 'Post' | 'Req' | 'Res' | 'StreamableFile'
  >;
  readonly core: Pick<typeof NestCore, 'NestFactory'>;
  readonly idem: Pick<typeof IdemNest, 'IdempotencyModule' | 'idempotencyContext'>;
  /** `@nestjs/platform-fastify`'s adapter, for the Fastify platform. */
  readonly FastifyAdapter?: typeof FastifyAdapter;
}

/** The adapter conformance suite's harness for `idem/nest` on one platform, over the given Nest packages. */
export function nestHarness(platform: 'express' | 'fastify', nest: NestLibraries): AdapterHarness {
  const { Body, Controller, Module, Post, Req, Res, StreamableFile } = nest.common;
  const { NestFactory } = nest.core;
  const { IdempotencyModule, idempotencyContext } = nest.idem;
  return {
    name: `nest (${nest.version}, ${platform})`,
    supports: { compression: true, rawEnd: platform === 'express' },
    async serve({ options, compress, handler }) {
      const STORE = Symbol('store');
      class StoreModule {}
      const stores: DynamicModule = {
        module: StoreModule,
        providers: [{ provide: STORE, useValue: options.store }],
        exports: [STORE],
      };

      class ChargesController {
        async create(body: unknown, req: NestRequest, res: PlatformResponse): Promise<unknown> {
          const url = req.originalUrl ?? req.url;
          const search = url.indexOf('?');
          const reply: SuiteReply = await handler({
            body,
            query: search === -1 ? '' : url.slice(search),
            context: idempotencyContext(req),
          });
          switch (reply.style) {
            case 'json':
              answer(res, reply.status, reply.headers);
              return reply.json;
            case 'stream':
              answer(res, reply.status, reply.headers);
              return new StreamableFile(Readable.from(reply.chunks));
            case 'empty':
              answer(res, reply.status, reply.headers);
              return undefined;
            case 'throw':
              throw new Error(reply.message);
            case 'raw-end':
              return res.end?.(reply.value);
          }
        }
      }
      Controller('v1')(ChargesController);
      route(ChargesController, 'create', [Post('charges')], [Body(), Req(), Res({ passthrough: true })]);

      class AppModule {}
      Module({
        imports: [
          IdempotencyModule.forRootAsync({
            imports: [stores],
            inject: [STORE],
            useFactory: (store: IdempotencyStore<Database.Database>) => ({
              ...options,
              store,
              scope: (req: NestRequest) => (req.headers['x-tenant'] as string | undefined) ?? 'acct_suite',
            }),
          }),
        ],
        controllers: [ChargesController],
      })(AppModule);

      if (platform === 'express') {
        const app = await NestFactory.create<NestExpressApplication>(AppModule, { rawBody: true, logger: false });
        if (compress) app.use(compression());
        await app.listen(0, '127.0.0.1');
        const server: Server = app.getHttpServer();
        return {
          url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
          close: async () => {
            server.closeAllConnections();
            await app.close();
          },
        };
      }
      if (!nest.FastifyAdapter) throw new Error(`no FastifyAdapter given for ${nest.version}`);
      const app = await NestFactory.create<NestFastifyApplication>(
        AppModule,
        new nest.FastifyAdapter({ forceCloseConnections: true }),
        {
          rawBody: true,
          logger: false,
        },
      );
      // @fastify/compress is typed against the repo's fastify, Nest's adapter brings its own copy: same plugin API.
      if (compress)
        await app.register(fastifyCompress as unknown as Parameters<NestFastifyApplication['register']>[0], {
          global: true,
        });
      await app.listen(0, '127.0.0.1');
      const server: Server = app.getHttpServer();
      return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => app.close() };
    },
  };
}
