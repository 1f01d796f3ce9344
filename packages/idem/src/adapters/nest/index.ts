/**
 * @module `idem/nest` — idempotency keys for NestJS 11 on Express or Fastify: `IdempotencyModule` registers an
 * app-wide interceptor built on the same gate as every other adapter; `@Idempotent()` sets per-route options.
 */
import { ServerResponse } from 'node:http';
import {
  createParamDecorator,
  SetMetadata,
  StreamableFile,
  type CallHandler,
  type CustomDecorator,
  type DynamicModule,
  type ExecutionContext,
  type InjectionToken,
  type ModuleMetadata,
  type NestInterceptor,
  type OnModuleInit,
  type OptionalFactoryDependency,
  type Provider,
} from '@nestjs/common';
import {
  APP_INTERCEPTOR,
  BaseExceptionFilter,
  DiscoveryModule,
  DiscoveryService,
  HttpAdapterHost,
  MetadataScanner,
  Reflector,
} from '@nestjs/core';
import { of, type Observable } from 'rxjs';
import {
  BodyTooLargeError,
  configError,
  createGate,
  type Engine,
  type Gate,
  type HandlerContext,
  type IdempotencyOptions,
} from '../../http/index.js';
import { abandonHeld, hold, type Held, type HoldSettings, type Recorder, type Run } from '../node/hold.js';
import { headerValue, NO_BYTES } from '../shared.js';
import { eachHandler, installWatcher, keep, watchRun } from './handler.js';

/**
 * The request as the interceptor reads it: Express's `Request` and Fastify's `FastifyRequest` both fit. `rawBody`
 * is what Nest keeps when the app is created with `rawBody: true`.
 */
export interface NestRequest {
  readonly method: string;
  readonly url: string;
  /** Express: the URL before routing stripped a mount path. */
  readonly originalUrl?: string;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly rawBody?: Buffer | undefined;
}

/**
 * The Web layer's options; `scope`, `required`, `key`, `ttlFor`, `classify`, `fingerprintBody` and `onError`
 * receive the platform's request (Express `Request` or `FastifyRequest`: name it with `Req`).
 */
export type NestIdempotencyOptions<Tx = never, Req = NestRequest> = IdempotencyOptions<Tx, Req>;

/**
 * Per-route options of `@Idempotent()`: any option but the store and the event hook, which the app shares.
 * They are merged over the module's (a controller's over the module's, a method's over its controller's).
 */
export type IdempotentRouteOptions<Tx = never, Req = NestRequest> = Partial<
  Omit<NestIdempotencyOptions<Tx, Req>, 'store' | 'onEvent'>
>;

/** `IdempotencyModule.forRootAsync`: the options made by a factory, with its dependencies injected. */
export interface IdempotencyModuleAsyncOptions<Tx = never, Req = NestRequest> extends Pick<ModuleMetadata, 'imports'> {
  readonly inject?: Array<InjectionToken | OptionalFactoryDependency>;
  readonly useFactory: (...args: never[]) => NestIdempotencyOptions<Tx, Req> | Promise<NestIdempotencyOptions<Tx, Req>>;
}

/** The injection token of the module's options. */
export const IDEMPOTENCY_OPTIONS = Symbol('idem:nest:options');

/** The metadata key `@Idempotent()` writes. */
const ROUTE_OPTIONS = 'idem:nest:route';

// Nest's own metadata for `@Res()`/`@Next()` (RouteParamtypes.RESPONSE = 1, NEXT = 2) and `passthrough`: a route
// that takes the response without passthrough answers by itself, and Nest then sends nothing for it.
const ROUTE_ARGS_METADATA = '__routeArguments__';
const RESPONSE_PASSTHROUGH_METADATA = '__responsePassthrough__';
const RESPONSE_OR_NEXT = new Set(['1', '2']);

const contexts = new WeakMap<object, HandlerContext<unknown>>();

/**
 * Per-route (or per-controller) idempotency options, merged over the module's; `@Idempotent(false)` leaves the
 * route alone. Without it a route gets the module's options.
 *
 * @example
 * @Post('charges')
 * @Idempotent({ required: true, fingerprintFields: { exclude: ['metadata.sentAt'] } })
 * create(@Body() body: CreateCharge) { ... }
 */
export function Idempotent<Tx = never, Req = NestRequest>(
  options: IdempotentRouteOptions<Tx, Req> | false = {},
): CustomDecorator<string> {
  if (options !== false && (typeof options !== 'object' || options === null)) {
    throw configError('@Idempotent(options)', 'an options object, or false to leave the route alone', options);
  }
  for (const name of ['store', 'onEvent'] as const) {
    if (options !== false && name in options)
      throw configError(name, `set on IdempotencyModule, not per route`, '@Idempotent');
  }
  return SetMetadata(ROUTE_OPTIONS, options);
}

/**
 * The request's idempotency context: the record's stable `id` (pass it downstream as the idempotency key),
 * `declare()`, `protected` and the lease's `signal`. Undefined on routes the interceptor left alone.
 *
 * @example
 * const { id } = idempotencyContext(request) ?? {}
 */
export function idempotencyContext<Tx = never>(request: object): HandlerContext<Tx> | undefined {
  return contexts.get(request) as HandlerContext<Tx> | undefined;
}

/**
 * A parameter decorator for the request's idempotency context (see {@link idempotencyContext}).
 *
 * @example
 * create(@Body() body: CreateCharge, @IdempotencyContext() idem: HandlerContext<never>) { ... }
 */
export const IdempotencyContext: () => ParameterDecorator = createParamDecorator(
  (_data: unknown, context: ExecutionContext) => idempotencyContext(context.switchToHttp().getRequest<object>()),
);

/**
 * What the interceptor holds per route: the gate, and the settings its responses are held with; `null` for a route
 * left alone.
 */
type RouteGate = {
  readonly gate: Gate<unknown, NestRequest>;
  readonly settings: HoldSettings<NestRequest>;
} | null;

function routeGate(options: NestIdempotencyOptions<unknown>): RouteGate & object {
  const gate = createGate(options);
  // No `answerFor`: past `maxHoldMs` the client gets the lease's 409 when the handler ends (from `complete`).
  const settings = Object.freeze({
    limit: gate.maxResponseBytes,
    replayHeaders: gate.replayHeaders,
    classify: options.classify,
    graceMs: Math.ceil(gate.engine.leaseMs / 2),
  });
  return { gate, settings };
}

/** How a refusal or replay is held: any body Nest writes is dropped, and the answer sent in its place. */
const ANSWERING: HoldSettings<NestRequest> = Object.freeze({
  limit: 0,
  replayHeaders: [],
  classify: undefined,
  graceMs: Infinity,
});

/** A run that has settled: the handler of a refused request never runs. */
const SETTLED: Run = Object.freeze({ settled: true, unseen: false, whenSettled: () => Promise.resolve(true) });

/** The recorder of a refusal or replay: `complete` answers the fixed response in place of what Nest sends. */
function answering(response: Response): Recorder {
  return { lease: null, complete: () => Promise.resolve(response), fail: () => Promise.resolve() };
}

/**
 * The interceptor `IdempotencyModule` registers app-wide. Per request it admits the request at the gate (the raw
 * body Nest kept with `rawBody: true`), answers a replay or a refusal itself, or runs the handler under the
 * claim with the response held below every interceptor, pipe and exception filter: what the platform would send
 * is recorded first, then sent (or replaced by the 503/409 problem when it could not be recorded). An answer that
 * would free the key (retryable) while the handler still runs — an inner timeout interceptor's 408 — is sent at once
 * and recorded when the handler settles: a watcher it appends innermost to every controller method sees that.
 *
 * Made by the module (its constructor takes the options, not injected metadata): use the module.
 */
export class IdempotencyInterceptor implements NestInterceptor, OnModuleInit {
  readonly #options: NestIdempotencyOptions<unknown, NestRequest>;
  readonly #reflector: Reflector;
  readonly #discovery: DiscoveryService | undefined;
  readonly #scanner: MetadataScanner | undefined;
  readonly #adapter: HttpAdapterHost | undefined;
  readonly #gate: RouteGate & object;
  /** By controller class, then handler: controllers that inherit one handler may decide differently. */
  readonly #routes = new Map<object, Map<object, RouteGate>>();

  constructor(
    options: NestIdempotencyOptions<unknown, NestRequest>,
    reflector: Reflector,
    discovery?: DiscoveryService,
    scanner?: MetadataScanner,
    adapter?: HttpAdapterHost,
  ) {
    this.#options = options;
    this.#reflector = reflector;
    this.#discovery = discovery;
    this.#scanner = scanner;
    this.#adapter = adapter;
    this.#gate = routeGate(options);
    // Made with the providers, before Nest registers the routes (and reads their interceptors).
    if (discovery && scanner) installWatcher(discovery, scanner);
  }

  /** The module's engine (routes with their own options have engines of their own, on the same store). */
  get engine(): Engine<unknown> {
    return this.#gate.gate.engine;
  }

  /** Builds every decorated route's gate now, so a bad option fails the app's start, naming the option. */
  onModuleInit(): void {
    if (this.#discovery && this.#scanner)
      eachHandler(this.#discovery, this.#scanner, (h, type) => this.#route(h, type));
  }

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    if (context.getType() !== 'http') return next.handle();
    const route = this.#route(context.getHandler(), context.getClass());
    if (!route) return next.handle();
    const { gate } = route;
    const http = context.switchToHttp();
    const request = http.getRequest<NestRequest>();
    const res = rawResponse(http.getResponse<unknown>());

    const admission = await gate.admit({
      native: request,
      method: request.method,
      url: request.originalUrl ?? request.url,
      header: (name) => headerValue(request.headers, name),
      body: async (limit) => rawBody(request, limit),
    });
    if (admission.kind === 'pass') {
      contexts.set(request, admission.context);
      return next.handle();
    }
    if (admission.kind === 'answer') {
      const { response } = admission;
      // Whatever Nest sends for the value handed back is swapped for the answer. A route that takes @Res() answers
      // by itself, and it does not run: Nest sends nothing for it, so the answer is sent from here.
      hold(res, request, answering(response), ANSWERING, SETTLED);
      if (!nestReplies(context)) res.end();
      return of(undefined);
    }
    contexts.set(request, admission.context);
    const claim = admission;
    const run = watchRun(request);
    const holding = hold(res, request, claim, route.settings, run);
    const replies = nestReplies(context);
    const adapter = this.#adapter?.httpAdapter;
    return keep(next.handle(), {
      // A StreamableFile whose stream is destroyed before its end (the platform destroys it when the client goes
      // away mid-body) will never end its response: it is abandoned (failed, retryable), not renewed for good.
      value: (value) => {
        if (value instanceof StreamableFile) watch(value, holding);
      },
      ended: () => run.chainSettled(),
      orphaned: (outcome) => {
        // Nest tore the chain down (its client went away) before it ended: Nest sends nothing now, but the work
        // went on. Its outcome is written as Nest's reply (or its default exception filter) would write it, so it
        // is recorded and the retry replays it. An answer Nest is still writing for another reason lands first.
        setImmediate(() => {
          if (holding.ended || !replies) return;
          if (!adapter) return void claim.fail();
          try {
            if ('error' in outcome) new BaseExceptionFilter(adapter).catch(outcome.error, context);
            else
              void Promise.resolve(adapter.reply(http.getResponse<unknown>(), outcome.value)).catch(() =>
                abandonHeld(holding),
              );
          } catch {
            abandonHeld(holding);
          }
        });
      },
    });
  }

  /** The gate of a route: the module's, one of the route's own options, or none. */
  #route(handler: object, type: object): RouteGate {
    let byHandler = this.#routes.get(type);
    if (!byHandler) this.#routes.set(type, (byHandler = new Map<object, RouteGate>()));
    const known = byHandler.get(handler);
    if (known !== undefined) return known;
    const onClass = this.#reflector.get<IdempotentRouteOptions<unknown, NestRequest> | false | undefined>(
      ROUTE_OPTIONS,
      type as () => unknown,
    );
    const onMethod = this.#reflector.get<IdempotentRouteOptions<unknown, NestRequest> | false | undefined>(
      ROUTE_OPTIONS,
      handler as () => unknown,
    );
    let gate: RouteGate;
    if (onMethod === false || (onMethod === undefined && onClass === false)) gate = null;
    else if (onMethod === undefined && onClass === undefined) gate = this.#gate;
    else {
      gate = routeGate({ ...this.#options, ...(onClass || {}), ...(onMethod || {}) });
    }
    byHandler.set(handler, gate);
    return gate;
  }
}

/**
 * The module: `forRoot(options)` or `forRootAsync({ imports, inject, useFactory })` (the store from your own
 * provider). It registers {@link IdempotencyInterceptor} as an app-wide interceptor: every route is covered with
 * the module's options (keys required or not, methods `POST` and `PATCH` by default); `@Idempotent()` changes a
 * route's. Create the app with `rawBody: true`: the fingerprint needs the body's bytes as they came.
 *
 * @example
 * @Module({
 *   imports: [
 *     StoreModule,
 *     IdempotencyModule.forRootAsync({
 *       imports: [StoreModule],
 *       inject: [IDEM_STORE],
 *       useFactory: (store: IdempotencyStore) => ({ store, scope: (req: Request) => req.user.account }),
 *     }),
 *   ],
 *   controllers: [ChargesController],
 * })
 * export class AppModule {}
 *
 * const app = await NestFactory.create(AppModule, { rawBody: true })
 */
export class IdempotencyModule {
  static forRoot<Tx = never, Req = NestRequest>(options: NestIdempotencyOptions<Tx, Req>): DynamicModule {
    return dynamicModule([{ provide: IDEMPOTENCY_OPTIONS, useValue: options }], []);
  }

  static forRootAsync<Tx = never, Req = NestRequest>({
    imports = [],
    inject = [],
    useFactory,
  }: IdempotencyModuleAsyncOptions<Tx, Req>): DynamicModule {
    if (typeof useFactory !== 'function')
      throw configError('useFactory', 'a function returning the options', useFactory);
    return dynamicModule([{ provide: IDEMPOTENCY_OPTIONS, useFactory, inject }], imports);
  }
}

function dynamicModule(options: Provider[], imports: NonNullable<ModuleMetadata['imports']>): DynamicModule {
  return {
    module: IdempotencyModule,
    imports: [...imports, DiscoveryModule],
    providers: [
      ...options,
      {
        provide: IdempotencyInterceptor,
        useFactory: (
          settings: NestIdempotencyOptions<unknown, NestRequest>,
          reflector: Reflector,
          discovery: DiscoveryService,
          scanner: MetadataScanner,
          adapter: HttpAdapterHost,
        ) => new IdempotencyInterceptor(settings, reflector, discovery, scanner, adapter),
        inject: [IDEMPOTENCY_OPTIONS, Reflector, DiscoveryService, MetadataScanner, HttpAdapterHost],
      },
      { provide: APP_INTERCEPTOR, useExisting: IdempotencyInterceptor },
    ],
    exports: [IdempotencyInterceptor, IDEMPOTENCY_OPTIONS],
  };
}

function watch(file: StreamableFile, holding: Held): void {
  const stream = file.getStream();
  if (typeof stream.once !== 'function') return;
  stream.once('close', () => {
    if (!stream.readableEnded) abandonHeld(holding);
  });
}

const RAW_BODY_MISSING =
  'idem/nest: the request has a body but Nest kept no raw copy of it. Create the app with ' +
  '`NestFactory.create(AppModule, { rawBody: true })`, and register a parser for other content types with ' +
  "`app.useBodyParser('text')` (or `'raw'`), which then keeps the raw body too.";

/** The body's bytes as they came: Nest keeps them as `rawBody` when the app is created with `rawBody: true`. */
function rawBody(request: NestRequest, limit: number): Uint8Array {
  const raw = request.rawBody;
  if (raw instanceof Uint8Array) {
    if (raw.byteLength > limit) throw new BodyTooLargeError(limit);
    return raw;
  }
  const length = headerValue(request.headers, 'content-length');
  if (headerValue(request.headers, 'transfer-encoding') === null && (length === null || length === '0'))
    return NO_BYTES;
  throw new Error(RAW_BODY_MISSING);
}

/** The Node response under the platform's: Express's `res` is one, Fastify's `reply.raw` is one. */
function rawResponse(response: unknown): ServerResponse {
  if (response instanceof ServerResponse) return response as ServerResponse;
  const raw = (response as { raw?: unknown } | null)?.raw;
  if (raw instanceof ServerResponse) return raw as ServerResponse;
  throw new TypeError('idem/nest: the response is neither an Express response nor a Fastify reply.');
}

/** False for a route that takes `@Res()` or `@Next()` without `passthrough`: Nest sends nothing for it. */
function nestReplies(context: ExecutionContext): boolean {
  const type = context.getClass();
  const name = context.getHandler().name;
  const metadata = Reflect as unknown as { getMetadata(key: string, target: object, property: string): unknown };
  const args = metadata.getMetadata(ROUTE_ARGS_METADATA, type, name) as Record<string, unknown> | undefined;
  const takesResponse = Object.keys(args ?? {}).some((key) => RESPONSE_OR_NEXT.has(key.split(':')[0] ?? ''));
  return !takesResponse || metadata.getMetadata(RESPONSE_PASSTHROUGH_METADATA, type, name) === true;
}
