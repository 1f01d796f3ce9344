/**
 * A Next.js App Router route handler (`app/api/charges/route.ts`) behind `idempotency()` from `idem/http`, called
 * with real `NextRequest`s from `next/server` (next 16) against a real SQLite file: the handler gets the very
 * `NextRequest` it was given (class, `nextUrl`, `cookies`, unread body), `scope` reads a cookie from it, and a
 * `NextResponse` is recorded and replayed byte for byte. docs/INTEGRATIONS.md shows the same route.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotency } from 'idem/http';
import { sqliteStore } from 'idem/stores/sqlite';
import type { IdempotencyStore } from 'idem';
import { nextServer } from '#test/runtimes/next/server.js';

// next installs on first use (test/runtimes/install.ts).
const { NextRequest, NextResponse } = nextServer();
type NextRequest = InstanceType<typeof NextRequest>;

interface ChargeBody {
  readonly amount: number;
  readonly currency: string;
  readonly hold?: boolean;
}

/** The account a session cookie belongs to (a real app asks its session store). */
const accountOf = (request: NextRequest): string => `acct_${request.cookies.get('session')?.value ?? 'anonymous'}`;

/** app/api/charges/route.ts, with the store passed in so that the test owns it. */
function chargesRoute(store: IdempotencyStore<Database.Database>) {
  const seen: NextRequest[] = [];
  const runs: number[] = [];
  let hold: Promise<void> = Promise.resolve();
  let announce = (): void => {};
  const protect = idempotency({
    store,
    scope: (request) => accountOf(request as NextRequest), // the NextRequest Next.js handed the route
    required: true,
  });
  const POST = protect(async (request, { id }) => {
    const req = request as NextRequest; // the same object: idempotency() fingerprints a clone
    seen.push(req);
    const body = (await req.json()) as ChargeBody;
    runs.push(runs.length + 1);
    if (body.hold) {
      announce();
      await hold;
    }
    const charge = {
      id: `ch_${runs.length}`,
      amount: body.amount,
      currency: body.currency,
      record: id,
      expand: req.nextUrl.searchParams.get('expand'),
    };
    const response = NextResponse.json(charge, { status: 201, headers: { location: `/api/charges/${charge.id}` } });
    response.cookies.set('last_charge', charge.id);
    return response;
  });
  return {
    POST,
    seen,
    runs,
    /** Holds `hold: true` requests until the returned function is called; resolves `started` when one begins. */
    holdNext(): { started: Promise<void>; open: () => void } {
      let open!: () => void;
      hold = new Promise((resolve) => (open = resolve));
      const started = new Promise<void>((resolve) => (announce = resolve));
      return { started, open };
    },
  };
}

const charge = (key: string | undefined, body: ChargeBody, session = 'alice', query = '') =>
  new NextRequest(`http://localhost:3000/api/charges${query}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      cookie: `session=${session}`,
      ...(key === undefined ? {} : { 'idempotency-key': key }),
    },
    body: JSON.stringify(body),
  });

const read = async (response: Response) => ({
  status: response.status,
  text: await response.text(),
  replayed: response.headers.get('idempotent-replayed'),
  location: response.headers.get('location'),
  setCookie: response.headers.get('set-cookie'),
});

describe('Next.js App Router: a route handler behind idempotency()', () => {
  const dir = mkdtempSync(join(tmpdir(), 'idem-next-'));
  const store = sqliteStore({ database: new Database(join(dir, 'idem.db')), closeDatabase: true });
  const route = chargesRoute(store);
  beforeAll(async () => {
    await store.migrate();
  });
  afterAll(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('hands the handler the NextRequest itself: its class, nextUrl, cookies and unread body', async () => {
    const request = charge(randomUUID(), { amount: 500, currency: 'usd' }, 'alice', '?expand=customer');
    const answer = await read(await route.POST(request));
    const seen = route.seen.at(-1);
    expect(seen).toBe(request);
    expect([
      seen instanceof NextRequest,
      seen?.nextUrl.pathname,
      seen?.nextUrl.searchParams.get('expand'),
      seen?.cookies.get('session')?.value,
    ]).toEqual([true, '/api/charges', 'customer', 'alice']);
    expect([answer.status, JSON.parse(answer.text) as unknown]).toEqual([
      201,
      expect.objectContaining({ amount: 500, expand: 'customer' }),
    ]);
  });

  it('scopes by the account read from the NextRequest cookie; the retry replays the NextResponse byte for byte, without its Set-Cookie', async () => {
    const key = randomUUID();
    const before = route.runs.length;
    const first = await read(await route.POST(charge(key, { amount: 700, currency: 'usd' })));
    const retry = await read(await route.POST(charge(key, { amount: 700, currency: 'usd' })));
    const record = await store.get(`IDEMPOTENCY#acct_alice#${key}`);
    expect(first).toEqual({
      status: 201,
      text: `{"id":"ch_${before + 1}","amount":700,"currency":"usd","record":"${record?.id}","expand":null}`,
      replayed: null,
      location: `/api/charges/ch_${before + 1}`,
      setCookie: `last_charge=ch_${before + 1}; Path=/`,
    });
    expect(retry).toEqual({ ...first, replayed: 'true', setCookie: null });
    expect([route.runs.length - before, record?.scope, record?.status]).toEqual([1, 'acct_alice', 'succeeded']);
    // Another account's session with the same key is another record: it runs.
    const bob = await read(await route.POST(charge(key, { amount: 700, currency: 'usd' }, 'bob')));
    expect([bob.status, bob.replayed, route.runs.length - before]).toEqual([201, null, 2]);
  });

  it('refuses what it must: no key (400), the key with another amount (400), a duplicate while the first runs (409)', async () => {
    const before = route.runs.length;
    const missing = await read(await route.POST(charge(undefined, { amount: 1, currency: 'usd' })));
    const key = randomUUID();
    await route.POST(charge(key, { amount: 100, currency: 'usd' }));
    const reused = await read(await route.POST(charge(key, { amount: 101, currency: 'usd' })));
    const { started, open } = route.holdNext();
    const busy = randomUUID();
    const first = route.POST(charge(busy, { amount: 5, currency: 'usd', hold: true }));
    await started;
    const duplicate = await read(await route.POST(charge(busy, { amount: 5, currency: 'usd', hold: true })));
    open();
    const done = await read(await first);
    const type = (answer: { text: string }) => (JSON.parse(answer.text) as { type: string }).type;
    expect([
      missing.status,
      type(missing),
      reused.status,
      type(reused),
      duplicate.status,
      type(duplicate),
      done.status,
    ]).toEqual([
      400,
      'urn:idem:problem:idempotency-key-missing',
      400,
      'urn:idem:problem:idempotency-key-reused',
      409,
      'urn:idem:problem:idempotency-key-in-use',
      201,
    ]);
    expect(route.runs.length - before).toBe(2);
  });
});
