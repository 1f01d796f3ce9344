/**
 * `idem/nest` in a NestJS 11 app as one is written: a guard that authenticates, the store and a pg pool provided
 * through dependency injection, per-route options with `@Idempotent()`, the context through
 * `@IdempotencyContext()`, `HttpException`s, and a route that answers through `@Res()` — on Express and on
 * Fastify, over real HTTP against PostgreSQL (a schema of its own, dropped afterwards). Decorators are called
 * as functions (the repo's tsconfig has no `experimentalDecorators`); docs/INTEGRATIONS.md shows the same app
 * with decorator syntax.
 */
import 'reflect-metadata';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import {
  Body,
  Controller,
  HttpException,
  Inject,
  Module,
  Post,
  Req,
  Res,
  StreamableFile,
  UnprocessableEntityException,
  UseGuards,
  type CanActivate,
  type DynamicModule,
  type ExecutionContext,
  type INestApplication,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import pg from 'pg';
import { from, map, type Observable } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordPk } from '../../core/key.js';
import type { IdempotencyRecord } from '../../core/record.js';
import type { HandlerContext } from '../../http/middleware.js';
import { postgresStore, type PostgresStore } from '../../stores/postgres/index.js';
import { POSTGRES_URL, serviceAvailable } from '../../../../../test/services.js';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencyInterceptor,
  IdempotencyModule,
  type NestRequest,
} from './index.js';

const available = await serviceAvailable('PostgreSQL', POSTGRES_URL);
const ACCOUNT = 'acct_nest';
const API_KEY = 'sk_test_nest';
const DAY = 86_400_000;
const PG_POOL = Symbol('pg pool');
const IDEM_STORE = Symbol('idem store');
const WORK = Symbol('work');

type Platform = 'express' | 'fastify';
type Tx = pg.PoolClient;
interface AuthedRequest extends NestRequest {
  account?: string;
}
interface ChargeBody {
  readonly ref: string;
  readonly amount: number;
  readonly sentAt?: string;
  readonly destination?: string;
  readonly hold?: boolean;
}

/** What the handlers did, and the signals a case orders its requests by. */
class Work {
  readonly runs = new Map<string, number>();
  readonly #signals = new Map<string, Array<() => void>>();
  readonly #holds: Array<() => void> = [];
  #held: Promise<void> = Promise.resolve();

  /** Counts an execution for `ref` and announces it; waits while the case holds the work. */
  async run(body: ChargeBody): Promise<number> {
    const n = (this.runs.get(body.ref) ?? 0) + 1;
    this.runs.set(body.ref, n);
    this.notify(`start ${body.ref}`);
    if (body.hold) await this.#held;
    return n;
  }
  /** Resolves when the handler next starts for `ref`. */
  started(ref: string): Promise<void> {
    return this.when(`start ${ref}`);
  }
  /** Resolves at the next `notify(signal)`. */
  when(signal: string): Promise<void> {
    return new Promise((resolve) => this.#signals.set(signal, [...(this.#signals.get(signal) ?? []), resolve]));
  }
  notify(signal: string): void {
    for (const resolve of this.#signals.get(signal)?.splice(0) ?? []) resolve();
  }
  /** Holds every `hold: true` request until the returned function is called. */
  hold(): () => void {
    let open!: () => void;
    this.#held = new Promise((resolve) => (open = resolve));
    this.#holds.push(open);
    return open;
  }
  openAll(): void {
    for (const open of this.#holds.splice(0)) open();
  }
}

/** Authenticates in a guard, as Nest apps do: guards run before interceptors, so no claim happens without it. */
class AuthGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<AuthedRequest & { account?: string }>();
    if (request.headers.authorization !== `Bearer ${API_KEY}`) return false;
    request.account = ACCOUNT;
    return true;
  }
}

/** A method's and its parameters' decorators, applied as `@Post() @Idempotent() create(@Body() body)` would. */
function route(
  type: { prototype: object },
  method: string,
  decorators: MethodDecorator[],
  parameters: ParameterDecorator[] = [],
): void {
  const descriptor = Object.getOwnPropertyDescriptor(type.prototype, method) as PropertyDescriptor;
  for (const decorate of decorators) decorate(type.prototype, method, descriptor);
  parameters.forEach((decorate, index) => decorate(type.prototype, method, index));
}

class ChargesController {
  constructor(private readonly work: Work) {}

  async charge(body: ChargeBody, idem: HandlerContext<Tx> | undefined): Promise<object> {
    const n = await this.work.run(body);
    if (body.amount === 402) throw new HttpException({ error: 'card_declined', ref: body.ref }, 402);
    idem?.declare({
      effects: (tx) => tx.query(`INSERT INTO ${ledgerTable} (ref, record_id) VALUES ($1, $2)`, [body.ref, idem.id]),
    });
    return { id: `ch_${n}`, amount: body.amount, record: idem?.id ?? null };
  }

  async payout(body: ChargeBody, idem: HandlerContext<Tx> | undefined): Promise<object> {
    const n = await this.work.run(body);
    if (!body.destination) throw new UnprocessableEntityException('destination is required');
    return { id: `po_${n}`, destination: body.destination, protected: idem?.protected ?? null };
  }

  async webhook(body: ChargeBody): Promise<object> {
    return { run: await this.work.run(body) };
  }

  /**
   * An Observable of work already started: Nest tears it down when its client goes away (announced once the
   * server has seen the connection close), and a 402 is thrown from it.
   */
  watch(
    body: ChargeBody,
    req: { raw?: { socket?: NodeJS.EventEmitter }; socket?: NodeJS.EventEmitter },
  ): Observable<object> {
    (req.raw ?? req).socket?.once('close', () => this.work.notify(`closed ${body.ref}`));
    return from(this.work.run(body)).pipe(
      map((n) => {
        if (body.amount === 402) throw new HttpException({ error: 'card_declined', ref: body.ref }, 402);
        return { id: `obs_${n}` };
      }),
    );
  }

  /** A receipt streamed from a source that sends one line, then waits for good. */
  receipt(body: ChargeBody): StreamableFile {
    void this.work.run(body);
    const work = this.work;
    let sent = false;
    const source = new Readable({
      read() {
        if (sent) return;
        sent = true;
        this.push('line 1\n');
        work.notify(`streaming ${body.ref}`);
      },
    });
    return new StreamableFile(source, { type: 'text/plain' });
  }

  /** Answers through `@Res()`, then throws: the exception filter writes a second answer after the first. */
  async rawThenThrow(
    body: ChargeBody,
    res: { code?(n: number): { send(b: unknown): unknown }; status?(n: number): { json(b: unknown): unknown } },
  ): Promise<void> {
    const payload = { id: `raw_${await this.work.run(body)}` };
    if (res.code) res.code(201).send(payload);
    else res.status?.(201).json(payload);
    throw new Error('the audit log failed after the answer');
  }

  /** Answers through the platform's own response (`@Res()` without passthrough): Nest sends nothing for it. */
  async raw(
    body: ChargeBody,
    res: { code?(n: number): { send(b: unknown): unknown }; status?(n: number): { json(b: unknown): unknown } },
  ): Promise<void> {
    const payload = { id: `raw_${await this.work.run(body)}` };
    if (res.code) res.code(201).send(payload);
    else res.status?.(201).json(payload);
  }
}
Controller('v1')(ChargesController);
UseGuards(AuthGuard)(ChargesController);
Inject(WORK)(ChargesController, undefined, 0);
route(
  ChargesController,
  'charge',
  [Post('charges'), Idempotent({ required: true, fingerprintFields: { exclude: ['sentAt'] } })],
  [Body(), IdempotencyContext()],
);
route(
  ChargesController,
  'payout',
  [
    Post('payouts'),
    Idempotent({ classify: (status) => (status === 422 ? 'release' : undefined), ttlFor: () => 2 * DAY }),
  ],
  [Body(), IdempotencyContext()],
);
route(ChargesController, 'webhook', [Post('webhooks'), Idempotent(false)], [Body()]);
route(ChargesController, 'raw', [Post('raw')], [Body(), Res()]);
route(ChargesController, 'watch', [Post('watch')], [Body(), Req()]);
route(ChargesController, 'receipt', [Post('receipts')], [Body()]);
route(ChargesController, 'rawThenThrow', [Post('raw-then-throw')], [Body(), Res()]);

/** One handler, inherited by two controllers that decide differently about it. */
class BaseCharges {
  create(idem: HandlerContext<Tx> | undefined): object {
    return { protected: idem?.protected ?? null };
  }
}
route(BaseCharges, 'create', [Post('charges')], [IdempotencyContext()]);
class SandboxCharges extends BaseCharges {}
Controller('sandbox')(SandboxCharges);
UseGuards(AuthGuard)(SandboxCharges);
Idempotent(false)(SandboxCharges);
class LiveCharges extends BaseCharges {}
Controller('live')(LiveCharges);
UseGuards(AuthGuard)(LiveCharges);
Idempotent({ required: true })(LiveCharges);

let schema = '';
let ledgerTable = '';

describe.skipIf(!available)('idem/nest', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 10 });
  beforeAll(async () => {
    schema = `idem_nest_${randomBytes(5).toString('hex')}`;
    ledgerTable = `"${schema}".ledger`;
    const store = postgresStore({ pool, schema });
    await store.migrate();
    await pool.query(`CREATE TABLE ${ledgerTable} (ref text NOT NULL UNIQUE, record_id text NOT NULL)`);
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  /** The store comes from a provider of the app (made from the pool, another provider), as in a real app. */
  const storeModule = (): DynamicModule => {
    class StoreModule {}
    return {
      module: StoreModule,
      providers: [
        { provide: PG_POOL, useValue: pool },
        {
          provide: IDEM_STORE,
          inject: [PG_POOL],
          useFactory: async (on: pg.Pool) => {
            const store = postgresStore<Tx>({ pool: on, schema });
            await store.migrate();
            return store;
          },
        },
      ],
      exports: [IDEM_STORE],
    };
  };

  const appModule = (
    work: Work,
    errors: unknown[],
    routeOptions: { controllers?: Array<new (...args: never[]) => unknown> } = {},
  ) => {
    class AppModule {}
    Module({
      imports: [
        IdempotencyModule.forRootAsync({
          imports: [storeModule()],
          inject: [IDEM_STORE],
          useFactory: (store: PostgresStore<Tx>) => ({
            store,
            scope: (request: AuthedRequest) => request.account ?? '',
            onError: (error: unknown) => errors.push(error),
          }),
        }),
      ],
      controllers: routeOptions.controllers ?? [ChargesController],
      providers: [{ provide: WORK, useValue: work }],
    })(AppModule);
    return AppModule;
  };

  async function start(
    platform: Platform,
    {
      rawBody = true,
      sends,
      controllers,
    }: { rawBody?: boolean; sends?: Map<string, number>; controllers?: Array<new (...args: never[]) => unknown> } = {},
  ) {
    const work = new Work();
    const errors: unknown[] = [];
    const AppModule = appModule(work, errors, controllers ? { controllers } : {});
    let app: INestApplication;
    if (platform === 'express') {
      app = await NestFactory.create<NestExpressApplication>(AppModule, { rawBody, logger: false });
    } else {
      const fastify = await NestFactory.create<NestFastifyApplication>(
        AppModule,
        new FastifyAdapter({ forceCloseConnections: true }),
        {
          rawBody,
          logger: false,
        },
      );
      if (sends) {
        // How many times Fastify runs its send pipeline per request: once, whatever Idem holds meanwhile.
        fastify
          .getHttpAdapter()
          .getInstance()
          .addHook('onSend', async (request, _reply, payload) => {
            const ref = request.headers['x-ref'] as string;
            sends.set(ref, (sends.get(ref) ?? 0) + 1);
            return payload;
          });
      }
      app = fastify;
    }
    await app.listen(0, '127.0.0.1');
    const server = app.getHttpServer() as Server;
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const store = app.get<PostgresStore<Tx>>(IDEM_STORE, { strict: false });
    return {
      app,
      work,
      errors,
      store,
      post: (path: string, body: ChargeBody, headers: Record<string, string> = {}, signal?: AbortSignal) =>
        post(`${url}${path}`, body, headers, signal),
      record: (key: string): Promise<IdempotencyRecord | null> => store.get(recordPk(ACCOUNT, key)),
      ledger: async (ref: string) =>
        Number(
          (await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${ledgerTable} WHERE ref = $1`, [ref])).rows[0]
            ?.n,
        ),
      close: async () => {
        work.openAll();
        server.closeAllConnections();
        await app.close();
      },
    };
  }

  describe.each(['express', 'fastify'] as const)('on %s', (platform) => {
    let served: Awaited<ReturnType<typeof start>>;
    beforeAll(async () => {
      served = await start(platform);
    });
    afterAll(async () => served.close());

    it('the store reaches the interceptor through dependency injection', () => {
      expect(served.app.get(IdempotencyInterceptor).engine.store).toBe(served.store);
    });

    it('runs once, commits one ledger row, and replays the exact bytes marked Idempotent-Replayed', async () => {
      const ref = newRef();
      const key = randomUUID();
      const first = await served.post('/v1/charges', { ref, amount: 500 }, { 'idempotency-key': key });
      const retry = await served.post('/v1/charges', { ref, amount: 500 }, { 'idempotency-key': key });
      const record = await served.record(key);
      expect([first.status, first.text, first.headers.get('idempotent-replayed')]).toEqual([
        201,
        `{"id":"ch_1","amount":500,"record":"${record?.id}"}`,
        null,
      ]);
      expect([retry.status, retry.headers.get('idempotent-replayed'), retry.headers.get('content-type')]).toEqual([
        201,
        'true',
        first.headers.get('content-type'),
      ]);
      expect(Buffer.from(retry.bytes).equals(Buffer.from(first.bytes))).toBe(true);
      expect([served.work.runs.get(ref), await served.ledger(ref), record?.status, record?.response?.status]).toEqual([
        1,
        1,
        'succeeded',
        201,
      ]);
    });

    it('a duplicate while the first runs gets 409 key-in-use; the first then answers 201, once', async () => {
      const ref = newRef();
      const key = randomUUID();
      const open = served.work.hold();
      const begun = served.work.started(ref);
      const first = served.post('/v1/charges', { ref, amount: 500, hold: true }, { 'idempotency-key': key });
      await begun;
      const duplicate = await served.post('/v1/charges', { ref, amount: 500, hold: true }, { 'idempotency-key': key });
      expect([duplicate.status, duplicate.problem, duplicate.headers.get('retry-after')]).toEqual([
        409,
        'urn:idem:problem:idempotency-key-in-use',
        '1',
      ]);
      open();
      expect((await first).status).toBe(201);
      expect([served.work.runs.get(ref), await served.ledger(ref)]).toEqual([1, 1]);
    });

    it('the same key with another amount: 400 key-reused; another sentAt (excluded by the route) is the same request', async () => {
      const ref = newRef();
      const key = randomUUID();
      const first = await served.post(
        '/v1/charges',
        { ref, amount: 500, sentAt: '2026-01-01T00:00:00Z' },
        { 'idempotency-key': key },
      );
      const resent = await served.post(
        '/v1/charges',
        { ref, amount: 500, sentAt: '2026-01-01T00:00:09Z' },
        { 'idempotency-key': key },
      );
      const other = await served.post(
        '/v1/charges',
        { ref, amount: 501, sentAt: '2026-01-01T00:00:00Z' },
        { 'idempotency-key': key },
      );
      expect([first.status, resent.status, resent.headers.get('idempotent-replayed'), resent.text]).toEqual([
        201,
        201,
        'true',
        first.text,
      ]);
      expect([other.status, other.problem]).toEqual([400, 'urn:idem:problem:idempotency-key-reused']);
      expect(served.work.runs.get(ref)).toBe(1);
    });

    it('a route with required: true refuses a keyless request (400 key-missing) before the handler', async () => {
      const ref = newRef();
      const answer = await served.post('/v1/charges', { ref, amount: 500 });
      expect([answer.status, answer.problem, served.work.runs.get(ref)]).toEqual([
        400,
        'urn:idem:problem:idempotency-key-missing',
        undefined,
      ]);
    });

    it('a thrown HttpException(402) is the recorded answer: final, replayed byte for byte, no ledger row', async () => {
      const ref = newRef();
      const key = randomUUID();
      const first = await served.post('/v1/charges', { ref, amount: 402 }, { 'idempotency-key': key });
      const retry = await served.post('/v1/charges', { ref, amount: 402 }, { 'idempotency-key': key });
      expect([first.status, first.text]).toEqual([402, `{"error":"card_declined","ref":"${ref}"}`]);
      expect([retry.status, retry.text, retry.headers.get('idempotent-replayed')]).toEqual([402, first.text, 'true']);
      const record = await served.record(key);
      expect([record?.status, record?.retryable, served.work.runs.get(ref), await served.ledger(ref)]).toEqual([
        'failed',
        false,
        1,
        0,
      ]);
    });

    it("per-route classify releases a 422 (the fixed payload runs with the same key); per-route ttlFor sets the record's life", async () => {
      const ref = newRef();
      const key = randomUUID();
      const invalid = await served.post('/v1/payouts', { ref, amount: 500 }, { 'idempotency-key': key });
      expect([invalid.status, await served.record(key)]).toEqual([422, null]);
      const fixed = await served.post(
        '/v1/payouts',
        { ref, amount: 500, destination: 'ba_1' },
        { 'idempotency-key': key },
      );
      expect([fixed.status, fixed.text]).toEqual([201, '{"id":"po_2","destination":"ba_1","protected":true}']);
      const record = await served.record(key);
      expect([record?.status, (record?.expiresAt ?? 0) - (record?.claimedAt ?? 0)]).toEqual(['succeeded', 2 * DAY]);
    });

    it('@Idempotent(false) leaves a route alone: the same key runs twice and nothing is stored', async () => {
      const ref = newRef();
      const key = randomUUID();
      const first = await served.post('/v1/webhooks', { ref, amount: 1 }, { 'idempotency-key': key });
      const second = await served.post('/v1/webhooks', { ref, amount: 1 }, { 'idempotency-key': key });
      expect([first.text, second.text, await served.record(key)]).toEqual(['{"run":1}', '{"run":2}', null]);
    });

    it('a route that answers through @Res() is recorded and replayed too (Nest sends nothing for it)', async () => {
      const ref = newRef();
      const key = randomUUID();
      const first = await served.post('/v1/raw', { ref, amount: 1 }, { 'idempotency-key': key });
      const retry = await served.post('/v1/raw', { ref, amount: 1 }, { 'idempotency-key': key });
      expect([first.status, first.text, retry.status, retry.text, retry.headers.get('idempotent-replayed')]).toEqual([
        201,
        '{"id":"raw_1"}',
        201,
        '{"id":"raw_1"}',
        'true',
      ]);
      expect(served.work.runs.get(ref)).toBe(1);
    });

    it.each([
      [1, 201, 'succeeded', '{"id":"obs_1"}'],
      [402, 402, 'failed', '{"error":"card_declined","ref":"REF"}'],
    ] as const)(
      'a handler Observable Nest tears down (its client went away) still runs to its end: recorded (amount %i: %i), then replayed',
      async (amount, status, outcome, text) => {
        const ref = newRef();
        const key = randomUUID();
        const open = served.work.hold();
        const gone = new AbortController();
        const begun = served.work.started(ref);
        const closed = served.work.when(`closed ${ref}`);
        const attempt = served
          .post('/v1/watch', { ref, amount, hold: true }, { 'idempotency-key': key }, gone.signal)
          .catch((error: unknown) => error);
        await begun;
        gone.abort();
        expect(await attempt).toBeInstanceOf(Error);
        await closed; // Nest has torn the handler's Observable down
        const probe = await served.post('/v1/watch', { ref, amount, hold: true }, { 'idempotency-key': key });
        expect([probe.status, probe.problem]).toEqual([409, 'urn:idem:problem:idempotency-key-in-use']);
        open();
        await expect
          .poll(async () => (await served.record(key))?.status, { timeout: 5_000, interval: 20 })
          .not.toBe('in_progress');
        const record = await served.record(key);
        const retry = await served.post('/v1/watch', { ref, amount, hold: true }, { 'idempotency-key': key });
        expect([
          record?.status,
          record?.response?.status,
          retry.status,
          retry.text,
          retry.headers.get('idempotent-replayed'),
          served.work.runs.get(ref),
        ]).toEqual([outcome, status, status, text.replace('REF', ref), 'true', 1]);
      },
    );

    it('a StreamableFile whose client goes away mid-body settles its key failed, retryable, with nothing recorded', async () => {
      const ref = newRef();
      const key = randomUUID();
      const gone = new AbortController();
      const streaming = served.work.when(`streaming ${ref}`);
      const attempt = served
        .post('/v1/receipts', { ref, amount: 1 }, { 'idempotency-key': key }, gone.signal)
        .catch((error: unknown) => error);
      await streaming;
      gone.abort();
      expect(await attempt).toBeInstanceOf(Error);
      await expect
        .poll(async () => (await served.record(key))?.status, { timeout: 5_000, interval: 20 })
        .toBe('failed');
      const record = await served.record(key);
      expect([record?.retryable, record?.response, served.app.get(IdempotencyInterceptor).engine.activeLeases]).toEqual(
        [true, null, 0],
      );
    });

    it('a second answer after the first end (an exception filter after @Res()) changes neither the answer nor its framing', async () => {
      const ref = newRef();
      const key = randomUUID();
      const first = await served.post('/v1/raw-then-throw', { ref, amount: 1 }, { 'idempotency-key': key });
      const retry = await served.post('/v1/raw-then-throw', { ref, amount: 1 }, { 'idempotency-key': key });
      const record = await served.record(key);
      expect([
        first.status,
        first.text,
        first.headers.get('content-length'),
        first.headers.get('content-type'),
      ]).toEqual([201, '{"id":"raw_1"}', '14', 'application/json; charset=utf-8']);
      expect([record?.response?.status, retry.status, retry.text, served.work.runs.get(ref)]).toEqual([
        201,
        201,
        '{"id":"raw_1"}',
        1,
      ]);
    });

    it('a request the guard refuses claims nothing: 403, and no store round trip', async () => {
      const ref = newRef();
      const trips = served.store.roundTrips;
      const answer = await served.post(
        '/v1/charges',
        { ref, amount: 500 },
        { 'idempotency-key': randomUUID(), authorization: 'Bearer nope' },
      );
      expect([answer.status, served.store.roundTrips - trips, served.work.runs.get(ref)]).toEqual([403, 0, undefined]);
    });
  });

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

  it.each([
    ['express', [SandboxCharges, LiveCharges]],
    ['express', [LiveCharges, SandboxCharges]],
    ['fastify', [SandboxCharges, LiveCharges]],
  ] as const)(
    'controllers that inherit one handler keep their own @Idempotent decision (%s)',
    async (platform, controllers) => {
      const served = await start(platform, { controllers: [...controllers] });
      try {
        const key = randomUUID();
        const live = await served.post('/live/charges', { ref: newRef(), amount: 1 }, { 'idempotency-key': key });
        const keyless = await served.post('/live/charges', { ref: newRef(), amount: 1 });
        const sandbox = await served.post(
          '/sandbox/charges',
          { ref: newRef(), amount: 1 },
          { 'idempotency-key': randomUUID() },
        );
        expect([live.status, live.text, keyless.status, keyless.problem, sandbox.status, sandbox.text]).toEqual([
          201,
          '{"protected":true}',
          400,
          'urn:idem:problem:idempotency-key-missing',
          201,
          '{"protected":null}',
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

const newRef = (): string => `ref_${randomUUID()}`;

async function post(url: string, body: ChargeBody, headers: Record<string, string>, signal?: AbortSignal) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(10_000)]) : AbortSignal.timeout(10_000),
  });
  const bytes = new Uint8Array(await response.arrayBuffer());
  const text = new TextDecoder().decode(bytes);
  let problem: unknown;
  if (response.headers.get('content-type') === 'application/problem+json')
    problem = (JSON.parse(text) as { type: unknown }).type;
  return { status: response.status, headers: response.headers, bytes, text, problem };
}
