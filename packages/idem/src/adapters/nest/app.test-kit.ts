/**
 * The NestJS app the `idem/nest` tests serve, as one is written: a guard that authenticates, per-route options
 * with `@Idempotent()`, the context through `@IdempotencyContext()`, `HttpException`s, Observables, a
 * StreamableFile, and routes that answer through `@Res()`. Decorators are called as functions (the repo's tsconfig
 * has no `experimentalDecorators`); docs/INTEGRATIONS.md shows the same app with decorator syntax.
 */
import 'reflect-metadata';
import { Readable } from 'node:stream';
import {
  Body,
  Controller,
  HttpException,
  Inject,
  Post,
  Req,
  Res,
  StreamableFile,
  UnprocessableEntityException,
  UseGuards,
  type CanActivate,
  type ExecutionContext,
} from '@nestjs/common';
import type pg from 'pg';
import { from, map, type Observable } from 'rxjs';
import type { HandlerContext } from '../../http/middleware.js';
import { Idempotent, IdempotencyContext, type NestRequest } from './index.js';

export const ACCOUNT = 'acct_nest';
export const API_KEY = 'sk_test_nest';
export const DAY = 86_400_000;
export const WORK = Symbol('work');

export type Platform = 'express' | 'fastify';
export type Tx = pg.PoolClient;
export interface AuthedRequest extends NestRequest {
  account?: string;
}
export interface ChargeBody {
  readonly ref: string;
  readonly amount: number;
  readonly sentAt?: string;
  readonly destination?: string;
  readonly hold?: boolean;
}

/** What the handlers did, and the signals a case orders its requests by; `ledgerTable` is where charges commit. */
export class Work {
  readonly runs = new Map<string, number>();
  readonly #signals = new Map<string, Array<() => void>>();
  readonly #holds: Array<() => void> = [];
  #held: Promise<void> = Promise.resolve();

  constructor(readonly ledgerTable = '') {}

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
export class AuthGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<AuthedRequest & { account?: string }>();
    if (request.headers.authorization !== `Bearer ${API_KEY}`) return false;
    request.account = ACCOUNT;
    return true;
  }
}

/** A method's and its parameters' decorators, applied as `@Post() @Idempotent() create(@Body() body)` would. */
export function route(
  type: { prototype: object },
  method: string,
  decorators: MethodDecorator[],
  parameters: ParameterDecorator[] = [],
): void {
  const descriptor = Object.getOwnPropertyDescriptor(type.prototype, method) as PropertyDescriptor;
  for (const decorate of decorators) decorate(type.prototype, method, descriptor);
  parameters.forEach((decorate, index) => decorate(type.prototype, method, index));
}

/** What `@Res()` gives: Fastify's `reply` (`code().send()`) or Express's `res` (`status().json()`). */
interface PlatformResponse {
  code?(n: number): { send(b: unknown): unknown };
  status?(n: number): { json(b: unknown): unknown };
}

export class ChargesController {
  constructor(private readonly work: Work) {}

  async charge(body: ChargeBody, idem: HandlerContext<Tx> | undefined): Promise<object> {
    const n = await this.work.run(body);
    if (body.amount === 402) throw new HttpException({ error: 'card_declined', ref: body.ref }, 402);
    idem?.declare({
      effects: (tx) =>
        tx.query(`INSERT INTO ${this.work.ledgerTable} (ref, record_id) VALUES ($1, $2)`, [body.ref, idem.id]),
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
  async rawThenThrow(body: ChargeBody, res: PlatformResponse): Promise<void> {
    await this.raw(body, res);
    throw new Error('the audit log failed after the answer');
  }

  /** Answers through the platform's own response (`@Res()` without passthrough): Nest sends nothing for it. */
  async raw(body: ChargeBody, res: PlatformResponse): Promise<void> {
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
export class SandboxCharges extends BaseCharges {}
Controller('sandbox')(SandboxCharges);
UseGuards(AuthGuard)(SandboxCharges);
Idempotent(false)(SandboxCharges);
export class LiveCharges extends BaseCharges {}
Controller('live')(LiveCharges);
UseGuards(AuthGuard)(LiveCharges);
Idempotent({ required: true })(LiveCharges);
