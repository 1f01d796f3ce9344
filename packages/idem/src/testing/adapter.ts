/**
 * @module `idem/testing` — the adapter conformance suite: one HTTP contract that every framework adapter (and the
 * Web-standard layer) meets, checked over real HTTP against a real store. A third-party adapter writes an
 * {@link AdapterHarness} and calls {@link describeAdapterConformance} from its own Vitest file.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OutcomeKind } from '../core/engine.js';
import { recordPk } from '../core/key.js';
import type { IdempotencyRecord, IdempotencyStore } from '../core/record.js';

/** What the suite's handler may declare, as an adapter's `declare()` takes it. */
export interface SuiteDeclaration<Tx> {
  readonly outcome?: OutcomeKind;
  readonly resultId?: string;
  readonly effects?: (tx: Tx) => unknown;
}

/** The adapter's idempotency context, as the suite's handler uses it. */
export interface SuiteContext<Tx> {
  readonly id: string;
  /** False for a keyless request, which runs unguarded. */
  readonly protected: boolean;
  readonly signal: AbortSignal;
  declare(declaration: SuiteDeclaration<Tx>): void;
}

/** What the harness hands the suite's handler for each request. */
export interface SuiteInput<Tx> {
  /** The request body, parsed as JSON by the framework's own parser. */
  readonly body: unknown;
  /** The request's query string with its `?`, or `''`. */
  readonly query: string;
  /** The adapter's context (`idempotencyContext(res)`, `request.idempotency`, `c.get('idempotency')`…). */
  readonly context: SuiteContext<Tx> | undefined;
}

/** How the handler answers; the harness answers in the framework's own idiom for each style. */
export type SuiteReply =
  /** `res.status().json()`, `reply.code().send(object)`, `c.json()`, `Response.json()`. */
  | {
      readonly style: 'json';
      readonly status: number;
      readonly headers?: Record<string, string>;
      readonly json: unknown;
    }
  /**
   * A streamed body, its head sent first: Express `writeHead` then one `write` per chunk then `end`; Fastify
   * `reply.send(Readable)`; Hono `c.body(ReadableStream)`; Web `new Response(ReadableStream)` (see {@link replyStream}).
   */
  | {
      readonly style: 'stream';
      readonly status: number;
      readonly headers?: Record<string, string>;
      readonly chunks: readonly string[];
    }
  /** No body, e.g. a 303 with a Location. */
  | { readonly style: 'empty'; readonly status: number; readonly headers?: Record<string, string> }
  /** The handler throws `new Error(message)`; the framework's own error handling answers. */
  | { readonly style: 'throw'; readonly message: string }
  /** Express only (`supports.rawEnd`): `res.end(value)` with a value Node refuses (an ArrayBuffer, a number). */
  | { readonly style: 'raw-end'; readonly value: unknown };

export type SuiteHandler<Tx> = (input: SuiteInput<Tx>) => Promise<SuiteReply>;

/** The layer's options the suite sets; the harness adds `scope` and passes the rest to the adapter as they are. */
export interface AdapterSuiteOptions<Tx> {
  readonly store: IdempotencyStore<Tx>;
  readonly leaseMs?: number;
  readonly required?: boolean;
  readonly maxBodyBytes?: number;
  readonly maxResponseBytes?: number;
  readonly onError?: (error: unknown) => void;
}

export interface ServeSetup<Tx> {
  readonly options: AdapterSuiteOptions<Tx>;
  /** Mount the framework's gzip middleware after the idempotency middleware. */
  readonly compress: boolean;
  readonly handler: SuiteHandler<Tx>;
}

/** A server listening on 127.0.0.1. `close()` ends its open connections too. */
export interface ServedApp {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  readonly url: string;
  close(): Promise<void>;
}

/** How one adapter is put under the suite. */
export interface AdapterHarness {
  /** Shown in the test names. */
  readonly name: string;
  readonly supports?: {
    /** The framework has a compression middleware the harness mounts when `compress` is set. */
    readonly compression?: boolean;
    /** The framework hands the raw Node response to the handler (`raw-end` replies). */
    readonly rawEnd?: boolean;
  };
  /**
   * Serves `handler` for `POST /v1/charges` on 127.0.0.1:0 behind the adapter, with `options` plus a `scope` read
   * from the `x-tenant` request header (default `acct_suite`), and gzip after the middleware when `compress` is set.
   */
  serve<Tx>(setup: ServeSetup<Tx>): Promise<ServedApp>;
}

export interface AdapterConformanceOptions<Tx, S extends IdempotencyStore<Tx>> {
  readonly harness: AdapterHarness;
  /** A new, empty store with a ledger beside it (its own file, table or schema). The suite closes it. */
  readonly createStore: () => Promise<S>;
  /** The work's own write, run by the store inside the completion's transaction: one ledger row for `ref`. */
  readonly effect: (tx: Tx, ref: string) => void;
  /** How many ledger rows `ref` has in `store`. */
  readonly countEffects: (ref: string, store: S) => Promise<number>;
}

const TENANT = 'acct_suite';
/** How long the suite waits for an answer before calling it a hang. */
const ANSWER_MS = 5_000;
/** The lease of the cases that need one to lapse. */
const SHORT_LEASE_MS = 300;

/**
 * Registers the adapter conformance cases for one adapter.
 *
 * @example
 * describeAdapterConformance({
 *   harness: expressHarness,
 *   createStore: async () => { const store = sqliteStore({ database: new Database(file), closeDatabase: true }); await store.migrate(); return store },
 *   effect: (tx, ref) => { tx.prepare('INSERT INTO ledger (ref) VALUES (?)').run(ref) },
 *   countEffects: async (ref, store) => (store.database.prepare('SELECT count(*) AS n FROM ledger WHERE ref = ?').get(ref) as { n: number }).n,
 * })
 */
export function describeAdapterConformance<Tx, S extends IdempotencyStore<Tx>>({
  harness,
  createStore,
  effect,
  countEffects,
}: AdapterConformanceOptions<Tx, S>): void {
  describe(`adapter conformance: ${harness.name}`, { timeout: 20_000 }, () => {
    let store: S;
    let down: Switches;
    let served: ServedApp | undefined;
    let tenants: Set<string>;
    let gates: Array<() => void>;
    let executions: Map<string, number>;
    let onStart: Map<string, Array<() => void>>;

    beforeEach(async () => {
      store = await createStore();
      down = { claim: false, complete: false, renew: false };
      served = undefined;
      tenants = new Set([TENANT]);
      gates = [];
      executions = new Map();
      onStart = new Map();
    });

    afterEach(async () => {
      // Handlers a failed case left waiting finish first, so what is reported is a lease nothing ends.
      for (const open of gates) open();
      try {
        // Every request of the case has been answered: no record may still hold (and renew) a lease.
        await expect
          .poll(
            async () => {
              const open: string[] = [];
              for (const scope of tenants) {
                for (const r of await store.list({ scope, limit: 1_000 }))
                  if (r.status === 'in_progress') open.push(`${scope}/${r.key}`);
              }
              return open;
            },
            { timeout: 2_000, interval: 25, message: 'records left in_progress after every request was answered' },
          )
          .toEqual([]);
      } finally {
        await served?.close();
        await store.close();
      }
    });

    /** Serves `work` (counted per `ref`, announced to `started`) behind the adapter under test. */
    async function serve(
      work: (input: SuiteInput<Tx>, execution: number) => Promise<SuiteReply> | SuiteReply,
      options: Omit<AdapterSuiteOptions<Tx>, 'store'> = {},
      compress = false,
    ): Promise<void> {
      served = await harness.serve<Tx>({
        options: { store: switchable(store, down), onError: () => {}, ...options },
        compress,
        handler: async (input) => {
          const ref = refOf(input.body);
          const n = (executions.get(ref) ?? 0) + 1;
          executions.set(ref, n);
          for (const notify of onStart.get(ref)?.splice(0) ?? []) notify();
          return work(input, n);
        },
      });
    }
    const runs = (ref: string): number => executions.get(ref) ?? 0;
    /** Resolves when the handler next starts for `ref`. */
    const started = (ref: string): Promise<void> =>
      new Promise((resolve) => onStart.set(ref, [...(onStart.get(ref) ?? []), resolve]));
    /** A promise the handler waits on until the case opens it (afterEach opens any left shut). */
    const gate = (): { wait: Promise<void>; open: () => void } => {
      let open!: () => void;
      const wait = new Promise<void>((resolve) => (open = resolve));
      gates.push(open);
      return { wait, open };
    };
    /** A request left running while the case goes on: if the case fails first, its rejection is not left unhandled. */
    const inBackground = <T>(promise: Promise<T>): Promise<T> => {
      void promise.catch(() => {});
      return promise;
    };
    const record = (key: string, tenant = TENANT): Promise<IdempotencyRecord | null> =>
      store.get(recordPk(tenant, key));
    const ledger = (ref: string): Promise<number> => countEffects(ref, store);
    const commit = (context: SuiteContext<Tx> | undefined, ref: string): void =>
      context?.declare({ effects: (tx) => effect(tx, ref) });
    /** Polls until the key could be claimed again: no record, a terminal one, or a lease that has lapsed (nothing renews it). */
    const claimable = (key: string): Promise<void> =>
      expect
        .poll(
          async () => {
            const r = await record(key);
            return r === null || r.status !== 'in_progress' || r.leaseExpiresAt <= Date.now();
          },
          { timeout: 5_000, interval: 20, message: `the lease of ${key} never lapsed: something still renews it` },
        )
        .toBe(true);

    async function post({ key, ref, body, query = '', tenant, headers = {}, signal }: PostInit): Promise<Answer> {
      if (!served) throw new Error('serve() first');
      if (tenant !== undefined) tenants.add(tenant);
      const timeout = AbortSignal.timeout(ANSWER_MS);
      try {
        const response = await fetch(`${served.url}/v1/charges${query}`, {
          method: 'POST',
          redirect: 'manual',
          headers: {
            'content-type': 'application/json',
            ...(key === undefined ? {} : { 'idempotency-key': key }),
            ...(tenant === undefined ? {} : { 'x-tenant': tenant }),
            ...headers,
          },
          body: JSON.stringify(body ?? { ref, amount: 50_000, currency: 'usd' }),
          signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        });
        const bytes = new Uint8Array(await response.arrayBuffer());
        return { status: response.status, headers: response.headers, bytes, text: new TextDecoder().decode(bytes) };
      } catch (error) {
        if (timeout.aborted) throw new Error(`no answer within ${ANSWER_MS} ms (a hung response)`, { cause: error });
        throw error;
      }
    }

    const created = (n: number, style: 'json' | 'stream'): SuiteReply =>
      style === 'json'
        ? { style, status: 201, headers: { location: `/v1/charges/ch_${n}` }, json: { id: `ch_${n}`, amount: 50_000 } }
        : {
            style,
            status: 201,
            headers: { 'content-type': 'application/json', location: `/v1/charges/ch_${n}` },
            chunks: ['{"id":', `"ch_${n}",`, '"amount":50000}'],
          };
    const createdBody = (n: number): string => `{"id":"ch_${n}","amount":50000}`;
    const summary = (a: Answer) => [a.status, a.text, a.headers.get('location'), a.headers.get('idempotent-replayed')];

    describe('replay', () => {
      it.each(['json', 'stream'] as const)(
        'a new key runs once; the retry replays status, exact bytes and every stored header, marked as replayed (%s)',
        async (style) => {
          const ref = newRef();
          await serve(({ context }, n) => {
            commit(context, ref);
            return created(n, style);
          });
          const key = newKey();
          const first = await post({ key, ref });
          const retry = await post({ key, ref });
          expect(summary(first)).toEqual([201, createdBody(1), '/v1/charges/ch_1', null]);
          expect(summary(retry)).toEqual([201, createdBody(1), '/v1/charges/ch_1', 'true']);
          expect(retry.bytes).toEqual(first.bytes);
          for (const name of REPLAYED_HEADERS) expect(retry.headers.get(name), name).toBe(first.headers.get(name));
          expect([runs(ref), await ledger(ref)]).toEqual([1, 1]);
          const stored = await record(key);
          expect([stored?.status, stored?.response?.status]).toEqual(['succeeded', 201]);
        },
      );

      it('replays an empty 201 and a 204 as empty', async () => {
        const ref = newRef();
        await serve(({ body }) => ({ style: 'empty', status: (body as { status: number }).status }));
        for (const status of [201, 204]) {
          const key = newKey();
          const body = { ref, status };
          const first = await post({ key, body });
          const retry = await post({ key, body });
          expect([first.status, first.text, first.headers.get('idempotent-replayed')]).toEqual([status, '', null]);
          expect([retry.status, retry.text, retry.headers.get('idempotent-replayed')]).toEqual([status, '', 'true']);
        }
        expect(runs(ref)).toBe(2);
      });

      it('a 303 See Other is final: the retry replays it with its Location, and the handler ran once', async () => {
        const ref = newRef();
        await serve(() => ({ style: 'empty', status: 303, headers: { location: '/v1/charges/ch_1' } }));
        const key = newKey();
        const first = await post({ key, ref });
        const retry = await post({ key, ref });
        expect(summary(first)).toEqual([303, '', '/v1/charges/ch_1', null]);
        expect(summary(retry)).toEqual([303, '', '/v1/charges/ch_1', 'true']);
        expect(runs(ref)).toBe(1);
        const stored = await record(key);
        expect([stored?.status, stored?.response?.status]).toEqual(['succeeded', 303]);
      });

      it('keeps scopes apart: the same key under another tenant runs its own work', async () => {
        const ref = newRef();
        await serve((_input, n) => created(n, 'json'));
        const key = newKey();
        await post({ key, ref });
        const other = await post({ key, ref, tenant: 'acct_suite_other' });
        expect(summary(other)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
        expect([(await record(key))?.scope, (await record(key, 'acct_suite_other'))?.scope]).toEqual([
          TENANT,
          'acct_suite_other',
        ]);
        expect(runs(ref)).toBe(2);
      });

      it('lets nothing the client sends force a replay or skip the claim', async () => {
        const ref = newRef();
        await serve((_input, n) => created(n, 'json'));
        const forged = { 'idempotent-replayed': 'true', 'x-idempotent-replayed': 'true' };
        const key = newKey();
        const first = await post({ key, ref, headers: forged });
        expect(summary(first)).toEqual([201, createdBody(1), '/v1/charges/ch_1', null]);
        const other = await post({ key, body: { ref, amount: 2 }, headers: forged });
        expectProblem(other, 400, 'idempotency-key-reused');
        await post({ ref, headers: forged });
        await post({ ref, headers: forged });
        expect(runs(ref)).toBe(3);
      });

      it('costs 2 store round trips for a new key, 1 for a replay, a conflict or a mismatch', async () => {
        const ref = newRef();
        const hold = gate();
        await serve(async (_input, n) => {
          await hold.wait;
          return created(n, 'json');
        });
        const key = newKey();
        let trips = store.roundTrips;
        const measure = (): number => {
          const delta = store.roundTrips - trips;
          trips = store.roundTrips;
          return delta;
        };
        const begun = started(ref);
        const first = inBackground(post({ key, ref }));
        await begun;
        const fresh = measure();
        await post({ key, ref });
        const conflict = measure();
        hold.open();
        await first;
        const completion = measure();
        await post({ key, ref });
        const replay = measure();
        await post({ key, body: { ref, amount: 1 } });
        const mismatch = measure();
        expect({ fresh: fresh + completion, replay, conflict, mismatch }).toEqual({
          fresh: 2,
          replay: 1,
          conflict: 1,
          mismatch: 1,
        });
      });
    });

    describe('failures the retry runs again', () => {
      it.each([503, 500, 408, 429])(
        'a %i commits no effects and is retryable; the retry runs and commits once',
        async (status) => {
          const ref = newRef();
          await serve(({ context }, n) => {
            commit(context, ref);
            return n === 1 ? { style: 'json', status, json: { error: 'try_again' } } : created(n, 'json');
          });
          const key = newKey();
          const first = await post({ key, ref });
          expect([first.status, first.text, first.headers.get('idempotent-replayed')]).toEqual([
            status,
            '{"error":"try_again"}',
            null,
          ]);
          const failed = await record(key);
          expect([failed?.status, failed?.retryable, await ledger(ref)]).toEqual(['failed', true, 0]);
          const retry = await post({ key, ref });
          expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
          const replay = await post({ key, ref });
          expect(summary(replay)).toEqual([201, createdBody(2), '/v1/charges/ch_2', 'true']);
          expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
        },
      );

      it('a thrown error answers 500 and commits nothing; the retry runs again', async () => {
        const ref = newRef();
        await serve(({ context }, n) => {
          commit(context, ref);
          return n === 1 ? { style: 'throw', message: 'boom' } : created(n, 'json');
        });
        const key = newKey();
        const first = await post({ key, ref });
        expect([first.status, first.headers.get('idempotent-replayed')]).toEqual([500, null]);
        const failed = await record(key);
        expect([failed?.status, failed?.retryable, await ledger(ref)]).toEqual(['failed', true, 0]);
        const retry = await post({ key, ref });
        expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
        expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
      });

      it.skipIf(!harness.supports?.rawEnd).each([
        ['an ArrayBuffer', new ArrayBuffer(3)],
        ['a number', 12_345],
      ])(
        'res.end(%s) answers 500 as the framework would, ends the key retryable, and the server lives on',
        async (_what, value) => {
          const ref = newRef();
          await serve((_input, n) => (n === 1 ? { style: 'raw-end', value } : created(n, 'json')));
          const key = newKey();
          const first = await post({ key, ref });
          expect(first.status).toBe(500);
          const failed = await record(key);
          expect([failed?.status, failed?.retryable]).toEqual(['failed', true]);
          const retry = await post({ key, ref });
          expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
          expect(runs(ref)).toBe(2);
        },
      );
    });

    describe('the outcome must be recorded before the client has it', () => {
      it.each(['json', 'stream'] as const)(
        'store down at completion: 503 store-unavailable, never the 201; the retry runs the work and commits once (%s)',
        async (style) => {
          const ref = newRef();
          await serve(
            ({ context }, n) => {
              commit(context, ref);
              return created(n, style);
            },
            { leaseMs: SHORT_LEASE_MS },
          );
          const key = newKey();
          down.complete = true;
          const first = await post({ key, ref });
          expectProblem(first, 503, 'idempotency-store-unavailable');
          expect(first.headers.get('location')).toBeNull();
          expect(await ledger(ref)).toBe(0);
          down.complete = false;
          await claimable(key);
          const retry = await post({ key, ref });
          expect(summary(retry)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
          expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
        },
      );

      it.each(['json', 'stream'] as const)(
        'a lost lease: the attempt taken over answers 409 lease-lost, never its 201; one ledger row (%s)',
        async (style) => {
          const ref = newRef();
          const hold = gate();
          await serve(
            async ({ context }, n) => {
              commit(context, ref);
              if (n === 1) await hold.wait;
              return created(n, style);
            },
            { leaseMs: SHORT_LEASE_MS },
          );
          const key = newKey();
          down.renew = true;
          const begun = started(ref);
          const first = inBackground(post({ key, ref }));
          await begun;
          await claimable(key);
          const takeover = await post({ key, ref });
          expect(summary(takeover)).toEqual([201, createdBody(2), '/v1/charges/ch_2', null]);
          down.renew = false;
          hold.open();
          const late = await first;
          expectProblem(late, 409, 'idempotency-lease-lost');
          expect(late.headers.get('location')).toBeNull();
          const replay = await post({ key, ref });
          expect(summary(replay)).toEqual([201, createdBody(2), '/v1/charges/ch_2', 'true']);
          expect([runs(ref), await ledger(ref)]).toEqual([2, 1]);
        },
      );

      it('a client that disconnects does not release the key: the work finishes, is recorded and replayed', async () => {
        const ref = newRef();
        const hold = gate();
        await serve(async ({ context }, n) => {
          commit(context, ref);
          if (n === 1) await hold.wait;
          return created(n, 'json');
        });
        const key = newKey();
        const abort = new AbortController();
        const begun = started(ref);
        const attempt = post({ key, ref, signal: abort.signal }).then(
          () => 'answered',
          (error: unknown) => error,
        );
        await begun;
        abort.abort();
        expect(await attempt).toBeInstanceOf(Error);
        // Answered after the server has seen the first connection close: the key is still held.
        const probe = await post({ key, ref });
        expectProblem(probe, 409, 'idempotency-key-in-use');
        hold.open();
        await expect
          .poll(async () => (await record(key))?.status, { timeout: 5_000, interval: 20 })
          .not.toBe('in_progress');
        const done = await record(key);
        expect([done?.status, done?.response?.status]).toEqual(['succeeded', 201]);
        const retry = await post({ key, ref });
        expect(summary(retry)).toEqual([201, createdBody(1), '/v1/charges/ch_1', 'true']);
        expect([runs(ref), await ledger(ref)]).toEqual([1, 1]);
      });
    });

    describe('refusals', () => {
      it('a keyless request runs unprotected every time, and leaves no record', async () => {
        const ref = newRef();
        await serve(({ context }) => ({ style: 'json', status: 201, json: { protected: context?.protected ?? null } }));
        const first = await post({ ref });
        const second = await post({ ref });
        expect([first.status, first.text, second.status, second.text]).toEqual([
          201,
          '{"protected":false}',
          201,
          '{"protected":false}',
        ]);
        expect([runs(ref), (await store.list({ scope: TENANT, limit: 10 })).length]).toEqual([2, 0]);
      });

      it('a keyless request where keys are required: 400 idempotency-key-missing, nothing runs', async () => {
        const ref = newRef();
        await serve((_input, n) => created(n, 'json'), { required: true });
        expectProblem(await post({ ref }), 400, 'idempotency-key-missing');
        expect(runs(ref)).toBe(0);
      });

      it('an invalid key: 400 idempotency-key-invalid, nothing runs or is stored', async () => {
        const ref = newRef();
        await serve((_input, n) => created(n, 'json'));
        expectProblem(await post({ key: 'two words', ref }), 400, 'idempotency-key-invalid');
        expect([runs(ref), (await store.list({ scope: TENANT, limit: 10 })).length]).toEqual([0, 0]);
      });

      it('the same key with another body, or the same body and another query: 400 idempotency-key-reused, record untouched', async () => {
        const ref = newRef();
        await serve((_input, n) => created(n, 'json'));
        const key = newKey();
        await post({ key, ref });
        const done = await record(key);
        expectProblem(await post({ key, body: { ref, amount: 1, currency: 'usd' } }), 400, 'idempotency-key-reused');
        expectProblem(await post({ key, ref, query: '?expand=customer' }), 400, 'idempotency-key-reused');
        expect(await record(key)).toEqual(done);
        expect(runs(ref)).toBe(1);
      });

      it('a body over maxBodyBytes: 413 request-too-large, nothing runs or is stored', async () => {
        const ref = newRef();
        await serve((_input, n) => created(n, 'json'), { maxBodyBytes: 64 });
        const key = newKey();
        expectProblem(await post({ key, body: { ref, pad: 'x'.repeat(100) } }), 413, 'request-too-large');
        expect([runs(ref), await record(key)]).toEqual([0, null]);
      });

      it('a duplicate while the first runs: 409 idempotency-key-in-use with Retry-After: 1, record untouched', async () => {
        const ref = newRef();
        const hold = gate();
        await serve(async (_input, n) => {
          await hold.wait;
          return created(n, 'json');
        });
        const key = newKey();
        const begun = started(ref);
        const first = inBackground(post({ key, ref }));
        await begun;
        const running = await record(key);
        const duplicate = await post({ key, ref });
        expectProblem(duplicate, 409, 'idempotency-key-in-use');
        expect(duplicate.headers.get('retry-after')).toBe('1');
        const after = await record(key);
        expect([after?.status, after?.token, after?.id]).toEqual(['in_progress', running?.token, running?.id]);
        hold.open();
        expect(summary(await first)).toEqual([201, createdBody(1), '/v1/charges/ch_1', null]);
        expect(runs(ref)).toBe(1);
      });

      it('the store down at the claim: 503 idempotency-store-unavailable, and the handler does not run', async () => {
        const ref = newRef();
        await serve((_input, n) => created(n, 'json'));
        down.claim = true;
        const answer = await post({ key: newKey(), ref });
        expectProblem(answer, 503, 'idempotency-store-unavailable');
        expect(answer.headers.get('retry-after')).toBe('1');
        expect(runs(ref)).toBe(0);
      });

      it('a response over maxResponseBytes: a final 500 response-too-large, replayed byte for byte', async () => {
        const ref = newRef();
        await serve(() => ({ style: 'json', status: 201, json: { id: 'ch_1', pad: 'x'.repeat(1_000) } }), {
          maxResponseBytes: 256,
        });
        const key = newKey();
        const first = await post({ key, ref });
        const retry = await post({ key, ref });
        expectProblem(first, 500, 'response-too-large');
        expectProblem(retry, 500, 'response-too-large');
        expect([
          retry.text,
          first.headers.get('idempotent-replayed'),
          retry.headers.get('idempotent-replayed'),
        ]).toEqual([first.text, null, 'true']);
        const stored = await record(key);
        expect([stored?.status, stored?.retryable, runs(ref)]).toEqual(['failed', false, 1]);
      });
    });

    it.skipIf(!harness.supports?.compression)(
      'gzip mounted after the middleware: the replay carries Content-Encoding: gzip and the first answer’s exact bytes',
      async () => {
        const ref = newRef();
        const json = { id: 'ch_1', note: 'x'.repeat(2_048) };
        await serve(() => ({ style: 'json', status: 201, headers: { location: '/v1/charges/ch_1' }, json }), {}, true);
        const key = newKey();
        const body = JSON.stringify({ ref, amount: 50_000, currency: 'usd' });
        const send = () =>
          rawPost(`${served?.url}/v1/charges`, { 'idempotency-key': key, 'accept-encoding': 'gzip' }, body);
        const first = await send();
        const retry = await send();
        const heads = (a: RawAnswer) => [
          a.status,
          a.headers['content-encoding'],
          a.headers.location,
          a.headers['idempotent-replayed'],
        ];
        expect(heads(first)).toEqual([201, 'gzip', '/v1/charges/ch_1', undefined]);
        expect(heads(retry)).toEqual([201, 'gzip', '/v1/charges/ch_1', 'true']);
        expect(gunzipSync(first.bytes).toString()).toBe(JSON.stringify(json));
        expect(retry.bytes.equals(first.bytes)).toBe(true);
        expect(gunzipSync(retry.bytes).toString()).toBe(JSON.stringify(json));
        expect(runs(ref)).toBe(1);
      },
    );
  });
}

/** Response headers a replay must reproduce exactly when the first answer had them (the default allow-list). */
const REPLAYED_HEADERS = [
  'content-type',
  'content-language',
  'content-disposition',
  'content-location',
  'location',
  'link',
  'etag',
  'last-modified',
  'cache-control',
  'expires',
  'vary',
];

interface PostInit {
  readonly key?: string;
  /** The suite's reference for the work: executions and ledger rows are counted by it. */
  readonly ref?: string;
  /** The JSON body; default `{ ref, amount: 50000, currency: 'usd' }`. It must carry `ref`. */
  readonly body?: { readonly ref: string } & Record<string, unknown>;
  readonly query?: string;
  readonly tenant?: string;
  readonly headers?: Record<string, string>;
  readonly signal?: AbortSignal;
}

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly bytes: Uint8Array;
  readonly text: string;
}

interface Switches {
  claim: boolean;
  complete: boolean;
  renew: boolean;
}

const newKey = (): string => `key_${randomUUID()}`;
const newRef = (): string => `ref_${randomUUID()}`;

function refOf(body: unknown): string {
  const ref = (body as { ref?: unknown } | null)?.ref;
  if (typeof ref !== 'string')
    throw new Error(`The suite's handler got a body without its ref: ${JSON.stringify(body)}`);
  return ref;
}

function expectProblem(answer: Answer, status: number, slug: string): void {
  let type: unknown = answer.text;
  try {
    type = (JSON.parse(answer.text) as { type?: unknown }).type;
  } catch {
    // Not JSON: the text itself shows in the failure.
  }
  expect([answer.status, answer.headers.get('content-type'), type]).toEqual([
    status,
    'application/problem+json',
    `urn:idem:problem:${slug}`,
  ]);
}

/** The store, with switches that make `claim`, `complete` or `renew` reject as a backend outage would. */
function switchable<Tx>(inner: IdempotencyStore<Tx>, down: Switches): IdempotencyStore<Tx> {
  const outage = (op: string) => Promise.reject(new Error(`${op}: the store is switched off by the conformance suite`));
  return {
    name: inner.name,
    get roundTrips() {
      return inner.roundTrips;
    },
    ...(inner.maxResponseBytes === undefined ? {} : { maxResponseBytes: inner.maxResponseBytes }),
    claim: (request) => (down.claim ? outage('claim') : inner.claim(request)),
    complete: (request) => (down.complete ? outage('complete') : inner.complete(request)),
    renew: (request) => (down.renew ? outage('renew') : inner.renew(request)),
    release: (request) => inner.release(request),
    get: (pk) => inner.get(pk),
    sweep: (request) => inner.sweep(request),
    list: (request) => inner.list(request),
    // The suite closes the real store itself, after the server.
    close: async () => {},
  };
}

interface RawAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** The body as it came over the wire, not decoded. */
  readonly bytes: Buffer;
}

/** A POST whose answer is read as raw bytes (fetch would decode gzip). */
function rawPost(url: string, headers: Record<string, string>, body: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      url,
      { method: 'POST', agent: false, timeout: ANSWER_MS, headers: { 'content-type': 'application/json', ...headers } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, headers: response.headers, bytes: Buffer.concat(chunks) }),
        );
        response.on('error', reject);
      },
    );
    request.on('timeout', () => request.destroy(new Error(`no answer within ${ANSWER_MS} ms (a hung response)`)));
    request.on('error', reject);
    request.end(body);
  });
}

/**
 * A Web `ReadableStream` that yields one chunk per read, for harnesses answering a `stream` reply.
 *
 * @example
 * return new Response(replyStream(reply.chunks), { status: reply.status, headers: reply.headers })
 */
export function replyStream(chunks: readonly string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let next = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      // One chunk per macrotask, so the body really arrives in pieces.
      await new Promise((resolve) => setImmediate(resolve));
      const chunk = chunks[next++];
      if (chunk === undefined) controller.close();
      else controller.enqueue(encoder.encode(chunk));
    },
  });
}

/**
 * Serves a Web-standard fetch handler (`(Request) => Promise<Response>`) with Node's HTTP server on 127.0.0.1:0,
 * for harnesses of Web-standard adapters. The request's `signal` aborts if the client goes away first.
 *
 * @example
 * const served = await serveFetch((request) => app.fetch(request))
 * await fetch(`${served.url}/v1/charges`, { method: 'POST', body })
 * await served.close()
 */
export async function serveFetch(handle: (request: Request) => Promise<Response>): Promise<ServedApp> {
  const server = createServer((req, res) => void bridge(handle, req, res));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function bridge(
  handle: (request: Request) => Promise<Response>,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const gone = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2)
    headers.append(req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string);
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  const init: RequestInit & { duplex?: 'half' } = {
    method: req.method ?? 'GET',
    headers,
    signal: gone.signal,
    ...(hasBody ? { body: Readable.toWeb(req) as unknown as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
  };
  try {
    const response = await handle(new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, init));
    const grouped = new Map<string, string[]>();
    for (const [name, value] of response.headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
    res.statusCode = response.status;
    for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? (values[0] as string) : values);
    if (response.body) {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        if (res.destroyed) break;
        res.write(chunk);
      }
    }
    res.end();
  } catch {
    if (!res.headersSent && !res.destroyed) {
      res.statusCode = 500;
      res.end();
    } else {
      res.destroy();
    }
  }
}
