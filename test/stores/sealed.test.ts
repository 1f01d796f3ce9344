/**
 * Sealed responses (`sealed()`, encryption at rest) through the Web layer (`idempotency()` from idem/http), on
 * every backing of ./sealed-kit.ts: replays are byte-identical; the backend holds neither the body nor a header
 * value in plain text; rotation; and every response that cannot be opened — an unknown key id, a flipped byte, an
 * envelope moved to another key's record — is a 503 problem with the handler run 0 times.
 */
import { describe, expect, it } from 'vitest';
import { recordPk, sealed, sealOverhead, SealedRecordError, type IdempotencyEvent, type SealingKey } from 'idem';
import { idempotency } from 'idem/http';
import { BACKINGS, type Opened } from './sealed-kit.js';

const DAY = 86_400_000;
const SCOPE = 'acct_sealed';
const A: SealingKey = { id: 'key-2026-01', key: new Uint8Array(32).fill(0xa1) };
const B: SealingKey = { id: 'key-2026-05', key: new Uint8Array(32).fill(0xb2) };
const CARD = '4242424242424242';
const LOCATION = '/v1/charges/ch_zoe_secret';

/** The handler's body for charge `n`: JSON with a card number and non-ASCII text, then bytes that are not UTF-8. */
const bodyOf = (n: number): Uint8Array<ArrayBuffer> =>
  Uint8Array.from([...Buffer.from(`{"id":"ch_${n}","card":"${CARD}","holder":"Zoë Ñandú"}`), 0x0a, 0x00, 0xff]);
/** The headers the record keeps, as Headers orders them (by name). */
const STORED_HEADERS = [
  ['content-type', 'application/json'],
  ['etag', '"tag-4242"'],
  ['location', LOCATION],
];
const UNAVAILABLE = {
  status: 503,
  type: 'application/problem+json',
  retryAfter: '1',
  body: {
    type: 'urn:idem:problem:idempotency-store-unavailable',
    title: 'Idempotency store unavailable',
    status: 503,
    detail: 'The request was not processed. Retry with the same Idempotency-Key.',
  },
};

const pkOf = (key: string) => recordPk(SCOPE, key);
const indexOf = (haystack: Uint8Array, needle: string): number => Buffer.from(haystack).indexOf(Buffer.from(needle));
/** The key id an envelope names: after the 4-byte magic, the version byte and the id's length byte. */
const keyIdOf = (envelope: Uint8Array): string => Buffer.from(envelope.subarray(6, 6 + (envelope[5] ?? 0))).toString();

/** A service on `opened`'s store sealed with `keys`; `runs` counts the handler's executions across services. */
function services(opened: Opened) {
  let runs = 0;
  /** Why each store call failed, by the engine's events. */
  const failures: Array<string | null> = [];
  const onEvent = (event: IdempotencyEvent) => {
    if (event.type === 'store_op' && !event.ok) {
      failures.push(event.error instanceof SealedRecordError ? event.error.reason : null);
    }
  };
  const serve = (keys: SealingKey[]) =>
    idempotency({ store: sealed(opened.store, { keys }), scope: () => SCOPE, ttlMs: DAY, onEvent })(async (request) => {
      runs++;
      const { n } = (await request.json()) as { n: number };
      return new Response(bodyOf(n), {
        status: 201,
        headers: { 'content-type': 'application/json', location: LOCATION, etag: '"tag-4242"', 'set-cookie': 's=1' },
      });
    });
  const post = (handle: ReturnType<typeof serve>, key: string, n = 1) =>
    handle(
      new Request('http://api.test/v1/charges', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ n }),
      }),
    );
  return { serve, post, runs: () => runs, failures };
}

const answer = async (response: Response) => ({
  status: response.status,
  headers: [...response.headers],
  body: new Uint8Array(await response.arrayBuffer()),
});
const problemOf = async (response: Response) => ({
  status: response.status,
  type: response.headers.get('content-type'),
  retryAfter: response.headers.get('retry-after'),
  body: (await response.json()) as unknown,
});

for (const backing of BACKINGS) {
  describe.skipIf(!backing.available)(`sealed responses on ${backing.name}`, () => {
    const withStore = async (test: (opened: Opened) => Promise<void>) => {
      const opened = await backing.open();
      try {
        await test(opened);
      } finally {
        await opened.close();
      }
    };

    it('a replay is byte-identical; the stored body holds no plaintext and the headers are sealed inside it', () =>
      withStore(async (opened) => {
        const { serve, post, runs } = services(opened);
        const service = serve([A]);
        const first = await answer(await post(service, 'k1'));
        expect([first.status, first.body]).toEqual([201, bodyOf(1)]);
        const replay = await answer(await post(service, 'k1'));
        expect(replay).toEqual({
          status: 201,
          headers: [...STORED_HEADERS.slice(0, 2), ['idempotent-replayed', 'true'], STORED_HEADERS[2]],
          body: bodyOf(1),
        });
        expect(runs()).toBe(1);

        const stored = await opened.raw.body(pkOf('k1'));
        expect(await opened.raw.headers(pkOf('k1'))).toEqual([]);
        expect([
          indexOf(stored, CARD),
          indexOf(stored, 'Zoë'),
          indexOf(stored, LOCATION),
          indexOf(stored, 'tag-4242'),
        ]).toEqual([-1, -1, -1, -1]);
        expect(stored.byteLength).toBe(
          bodyOf(1).byteLength + JSON.stringify(STORED_HEADERS).length + sealOverhead(A.id),
        );
        expect(keyIdOf(stored)).toBe('key-2026-01');
      }));

    it('rotation: records sealed with A replay under [B, A]; new records are sealed with B', () =>
      withStore(async (opened) => {
        const { serve, post, runs } = services(opened);
        await post(serve([A]), 'old');
        const rotated = serve([B, A]);
        const replay = await answer(await post(rotated, 'old'));
        expect([replay.status, replay.body, replay.headers.length]).toEqual([201, bodyOf(1), 4]);
        const fresh = await answer(await post(rotated, 'new', 2));
        expect([fresh.status, fresh.body]).toEqual([201, bodyOf(2)]);
        expect((await answer(await post(rotated, 'new', 2))).body).toEqual(bodyOf(2));
        expect(runs()).toBe(2);
        expect(keyIdOf(await opened.raw.body(pkOf('old')))).toBe('key-2026-01');
        expect(keyIdOf(await opened.raw.body(pkOf('new')))).toBe('key-2026-05');
      }));

    it('a record sealed with a key no longer configured is a 503 problem; the handler runs 0 times', () =>
      withStore(async (opened) => {
        const { serve, post, runs, failures } = services(opened);
        await post(serve([A]), 'k1');
        const onlyB = serve([B]);
        expect(await problemOf(await post(onlyB, 'k1'))).toEqual(UNAVAILABLE);
        expect(await problemOf(await post(onlyB, 'k1'))).toEqual(UNAVAILABLE);
        expect([runs(), failures]).toEqual([1, ['unknown-key', 'unknown-key']]);
        expect((await answer(await post(onlyB, 'k2', 2))).status).toBe(201); // other keys are served
        expect(runs()).toBe(2);
      }));

    it('one flipped byte in the stored ciphertext is a 503 problem; the handler runs 0 times', () =>
      withStore(async (opened) => {
        const { serve, post, runs, failures } = services(opened);
        const service = serve([A]);
        await post(service, 'k1');
        const stored = await opened.raw.body(pkOf('k1'));
        const at = stored.byteLength - 30; // inside the ciphertext, before the tag
        stored[at] = (stored[at] ?? 0) ^ 0x01;
        await opened.raw.setBody(pkOf('k1'), stored);
        expect(await problemOf(await post(service, 'k1'))).toEqual(UNAVAILABLE);
        expect([runs(), failures]).toEqual([1, ['not-authentic']]);
      }));

    it("a sealed response moved to another key's record is a 503 problem; the handler runs 0 times", () =>
      withStore(async (opened) => {
        const { serve, post, runs, failures } = services(opened);
        const service = serve([A]);
        await post(service, 'k1', 1);
        await post(service, 'k2', 1); // the same request under another key: only the record's key differs
        await opened.raw.setBody(pkOf('k2'), await opened.raw.body(pkOf('k1')));
        expect(await problemOf(await post(service, 'k2', 1))).toEqual(UNAVAILABLE);
        expect((await answer(await post(service, 'k1', 1))).body).toEqual(bodyOf(1));
        expect([runs(), failures]).toEqual([2, ['not-authentic']]);
      }));
  });
}

const [, , POSTGRES] = BACKINGS;
describe.skipIf(!POSTGRES?.available)('sealed responses on a local route (PostgreSQL)', () => {
  it('the handler runs in the claim transaction; the committed record is sealed and replays byte-identical', async () => {
    const opened = await (POSTGRES as (typeof BACKINGS)[number]).open();
    try {
      let runs = 0;
      const service = idempotency({
        store: sealed(opened.store, { keys: [A] }),
        scope: () => SCOPE,
        ttlMs: DAY,
        local: true,
      })(async (_request, { tx }) => {
        runs++;
        expect(tx).toBeDefined();
        return new Response(bodyOf(7), {
          status: 201,
          headers: { 'content-type': 'application/json', location: LOCATION },
        });
      });
      const post = () =>
        service(new Request('http://api.test/v1/t', { method: 'POST', headers: { 'idempotency-key': 'local-1' } }));
      expect((await answer(await post())).body).toEqual(bodyOf(7));
      const replay = await answer(await post());
      expect([replay.status, replay.body, replay.headers.at(1), runs]).toEqual([
        201,
        bodyOf(7),
        ['idempotent-replayed', 'true'],
        1,
      ]);
      const stored = await opened.raw.body(pkOf('local-1'));
      expect([indexOf(stored, CARD), keyIdOf(stored), await opened.raw.headers(pkOf('local-1'))]).toEqual([
        -1,
        'key-2026-01',
        [],
      ]);
    } finally {
      await opened.close();
    }
  });
});

describe('sealed responses on a local route (SQLite)', () => {
  it('is refused at start: SQLite runs local work synchronously, and sealing is asynchronous', async () => {
    const opened = await (BACKINGS[1] as (typeof BACKINGS)[number]).open();
    try {
      const store = sealed(opened.store, { keys: [A] });
      expect([typeof opened.store.runLocal, typeof store.runLocal]).toEqual(['function', 'undefined']);
      expect(() => idempotency({ store, scope: () => SCOPE, ttlMs: DAY, local: true })).toThrow(
        /^Expected `local` to be false/,
      );
    } finally {
      await opened.close();
    }
  });
});
