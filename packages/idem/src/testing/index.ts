/**
 * @module `idem/testing` — the store conformance suite. Every store in this package passes it against its real
 * backend; a third-party store calls {@link describeStoreConformance} from its own Vitest file.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { manualClock } from '../core/clock.js';
import { createEngine } from '../core/engine.js';
import type { ClaimRequest, IdempotencyRecord, IdempotencyStore, Outcome, StoredResponse } from '../core/record.js';
import { claimRequests, LEASE, T0, TTL } from './fixtures.js';

export interface ConformanceOptions<Tx> {
  /** Shown in the test names. */
  readonly name: string;
  /**
   * A new, empty store isolated from every other one (its own table, prefix or schema): the sweep and list
   * cases count exact numbers of records.
   */
  readonly create: () => Promise<IdempotencyStore<Tx>>;
  /** Extra round trips a claim may take under contention (Postgres's READ COMMITTED re-read). Default 0. */
  readonly contendedClaimExtraTrips?: number;
  /**
   * Round trips a refused claim takes to return the existing record. 1 where the engine returns it with the
   * failed write (docs/DESIGN.md: Round-trip budget); 2 only for an engine that cannot (dynalite ignores ALL_OLD). Default 1.
   */
  readonly refusedClaimTrips?: number;
}

/**
 * Registers the conformance cases for one store.
 *
 * @example
 * describeStoreConformance({ name: 'memory', create: async () => memoryStore() })
 */
export function describeStoreConformance<Tx>({
  name,
  create,
  contendedClaimExtraTrips = 0,
  refusedClaimTrips = 1,
}: ConformanceOptions<Tx>): void {
  describe(`store conformance: ${name}`, () => {
    let store: IdempotencyStore<Tx>;
    beforeEach(async () => {
      store = await create();
    });
    afterEach(async () => {
      await store.close();
    });

    const scope = 'acct_conformance';
    const request = claimRequests({ scope });
    const response: StoredResponse = {
      status: 201,
      headers: [
        ['content-type', 'application/json'],
        ['location', '/v1/charges/ch_1'],
      ],
      // Not valid UTF-8 on purpose: the body is bytes, not text.
      body: new Uint8Array([0x7b, 0x7d, 0x00, 0xff, 0xfe, 0x0a]),
    };
    const succeeded: Outcome = { status: 'succeeded', retryable: false, resultId: 'ch_1', response };
    const claimed = async (req: ClaimRequest): Promise<IdempotencyRecord> => {
      const result = await store.claim(req);
      expect(result.kind).toBe('claimed');
      return result.record;
    };
    const complete = (req: ClaimRequest, outcome: Outcome, token = req.token) =>
      store.complete({ pk: req.pk, token, now: req.now + 1, outcome });
    const plain = (record: IdempotencyRecord | null) =>
      record && { ...record, response: record.response && { ...record.response, body: [...record.response.body] } };

    it('a fresh claim writes in_progress with the request token, id and times, in one round trip', async () => {
      const req = request();
      const before = store.roundTrips;
      const record = await claimed(req);
      expect(store.roundTrips - before).toBe(1);
      expect(record).toEqual({
        pk: req.pk,
        scope,
        key: req.key,
        status: 'in_progress',
        fingerprint: req.fingerprint,
        id: req.id,
        token: req.token,
        claimedAt: T0,
        leaseExpiresAt: T0 + LEASE,
        expiresAt: T0 + TTL,
        retryable: false,
        resultId: null,
        response: null,
      });
      expect(await store.get(req.pk)).toEqual(record);
    });

    it('a second claim of a live key returns the existing record in the same round trip', async () => {
      const first = request();
      await claimed(first);
      const before = store.roundTrips;
      const second = await store.claim({ ...first, token: randomUUID(), id: randomUUID(), now: T0 + 5 });
      expect(store.roundTrips - before).toBe(refusedClaimTrips);
      expect(second.kind).toBe('existing');
      expect(second.record.token).toBe(first.token);
      expect(second.record.id).toBe(first.id);
    });

    it('50 concurrent claims of one key: exactly one is claimed, the rest see the winner', async () => {
      const base = request();
      const attempts = Array.from({ length: 50 }, () => ({ ...base, token: randomUUID(), id: randomUUID() }));
      const before = store.roundTrips;
      const results = await Promise.all(attempts.map((a) => store.claim(a)));
      const winners = results.filter((r) => r.kind === 'claimed');
      expect(winners.length).toBe(1);
      const winner = winners[0] as { record: IdempotencyRecord };
      for (const r of results) expect(r.record.token).toBe(winner.record.token);
      const trips = store.roundTrips - before;
      expect(trips).toBeGreaterThanOrEqual(1 + 49 * refusedClaimTrips);
      expect(trips).toBeLessThanOrEqual(1 + 49 * (refusedClaimTrips + contendedClaimExtraTrips));
      expect((await store.get(base.pk))?.token).toBe(winner.record.token);
    });

    it('complete with the token stores the outcome, response bytes and headers exactly', async () => {
      const req = request();
      const record = await claimed(req);
      expect(await complete(req, succeeded)).toEqual({ ok: true });
      expect(plain(await store.get(req.pk))).toEqual(plain({ ...record, ...succeeded }));
    });

    it('a write with a stale token is refused and changes nothing', async () => {
      const req = request();
      await claimed(req);
      const before = plain(await store.get(req.pk));
      const stale = randomUUID();
      expect(await complete(req, succeeded, stale)).toEqual({ ok: false });
      expect(await store.renew({ pk: req.pk, token: stale, now: T0 + 1, leaseMs: LEASE, expiresAt: T0 + TTL })).toEqual(
        { ok: false },
      );
      expect(await store.release({ pk: req.pk, token: stale })).toEqual({ ok: false });
      expect(plain(await store.get(req.pk))).toEqual(before);
    });

    it('a completed record cannot be completed again, even with its token', async () => {
      const req = request();
      await claimed(req);
      await complete(req, succeeded);
      const after = plain(await store.get(req.pk));
      const failed: Outcome = { status: 'failed', retryable: true, resultId: null, response: null };
      expect(await complete(req, failed)).toEqual({ ok: false });
      expect(
        await store.renew({ pk: req.pk, token: req.token, now: T0 + 2, leaseMs: LEASE, expiresAt: T0 + TTL }),
      ).toEqual({
        ok: false,
      });
      expect(plain(await store.get(req.pk))).toEqual(after);
    });

    it('renew with the token extends the lease from now and sets expiresAt as given', async () => {
      const req = request();
      const record = await claimed(req);
      const renewal = { pk: req.pk, token: req.token, now: T0 + 4_000, leaseMs: LEASE, expiresAt: T0 + TTL + 1 };
      expect(await store.renew(renewal)).toEqual({ ok: true });
      expect(await store.get(req.pk)).toEqual({
        ...record,
        leaseExpiresAt: T0 + 4_000 + LEASE,
        expiresAt: T0 + TTL + 1,
      });
    });

    it('a renewed lease outlives the original expiresAt: a claim after it meets the running attempt', async () => {
      // A short ttl, and work that runs past it while renewing its lease (the engine passes
      // expiresAt = max(previous expiresAt, now + leaseMs)).
      const req = request({ ttlMs: LEASE + 5_000 });
      const record = await claimed(req);
      const now = T0 + LEASE - 1;
      const expiresAt = now + LEASE;
      expect(await store.renew({ pk: req.pk, token: req.token, now, leaseMs: LEASE, expiresAt })).toEqual({ ok: true });
      const renewed = { ...record, leaseExpiresAt: now + LEASE, expiresAt };
      expect(await store.get(req.pk)).toEqual(renewed);
      // After the original expiresAt (T0 + 15 s), before the lease ends (T0 + 20 s - 1 ms).
      const retry = await store.claim({ ...req, token: randomUUID(), id: randomUUID(), now: T0 + LEASE + 5_000 + 1 });
      expect(retry).toEqual({ kind: 'existing', record: renewed });
      expect(await store.get(req.pk)).toEqual(renewed);
    });

    it('a late renewal with an older `now` does not shorten the lease', async () => {
      // The engine gave up on a renewal stuck on a dead connection and sent a newer one, which landed first.
      const req = request();
      const record = await claimed(req);
      const renew = (now: number, expiresAt: number) =>
        store.renew({ pk: req.pk, token: req.token, now, leaseMs: LEASE, expiresAt });
      expect(await renew(T0 + 200, T0 + TTL + 200)).toEqual({ ok: true });
      const renewed = { ...record, leaseExpiresAt: T0 + 200 + LEASE, expiresAt: T0 + TTL + 200 };
      expect(await renew(T0 + 100, T0 + TTL + 100)).toEqual({ ok: true });
      expect(await store.get(req.pk)).toEqual(renewed);
      // Past the stale lease (T0 + 100 + LEASE), before the one the store holds.
      const other = await store.claim({ ...req, token: randomUUID(), id: randomUUID(), now: T0 + 100 + LEASE + 1 });
      expect(other).toEqual({ kind: 'existing', record: renewed });
    });

    it('renew keeps each of the lease and the expiry at the later of stored and requested', async () => {
      const req = request();
      const record = await claimed(req);
      const renewal = { pk: req.pk, token: req.token, leaseMs: LEASE };
      expect(await store.renew({ ...renewal, now: T0 + 200, expiresAt: T0 + TTL + 500 })).toEqual({ ok: true });
      // A newer lease with an older expiry: the lease moves, the expiry stays.
      expect(await store.renew({ ...renewal, now: T0 + 300, expiresAt: T0 + TTL })).toEqual({ ok: true });
      const moved = { ...record, leaseExpiresAt: T0 + 300 + LEASE, expiresAt: T0 + TTL + 500 };
      expect(await store.get(req.pk)).toEqual(moved);
      // An older lease with a newer expiry: the expiry moves, the lease stays.
      expect(await store.renew({ ...renewal, now: T0 + 250, expiresAt: T0 + TTL + 900 })).toEqual({ ok: true });
      expect(await store.get(req.pk)).toEqual({ ...moved, expiresAt: T0 + TTL + 900 });
    });

    it('release with the token deletes the record and frees the key for any payload', async () => {
      const req = request();
      await claimed(req);
      expect(await store.release({ pk: req.pk, token: req.token })).toEqual({ ok: true });
      expect(await store.get(req.pk)).toBeNull();
      const other = { ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), id: randomUUID() };
      expect((await claimed(other)).id).toBe(other.id);
    });

    it('a live in_progress record is not claimable, even with the same fingerprint', async () => {
      const req = request();
      await claimed(req);
      const again = await store.claim({ ...req, token: randomUUID(), now: T0 + LEASE - 1 });
      expect(again.kind).toBe('existing');
    });

    it('a dead lease is taken over with the same fingerprint only, keeping the id with a new token', async () => {
      const req = request();
      await claimed(req);
      const later = T0 + LEASE;
      const other = await store.claim({ ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), now: later });
      expect(other.kind).toBe('existing');
      expect(other.record.token).toBe(req.token);
      const takeover = { ...req, token: randomUUID(), id: randomUUID(), now: later };
      const record = await claimed(takeover);
      expect(record.id).toBe(req.id);
      expect(record.token).toBe(takeover.token);
      expect(record.claimedAt).toBe(later);
      expect(record.leaseExpiresAt).toBe(later + LEASE);
      // The first owner is fenced out.
      expect(await complete(req, succeeded)).toEqual({ ok: false });
      expect((await store.get(req.pk))?.status).toBe('in_progress');
    });

    it('a retryable failure is claimable with the same fingerprint only, keeping the id', async () => {
      const req = request();
      await claimed(req);
      await complete(req, { status: 'failed', retryable: true, resultId: null, response: null });
      const other = await store.claim({ ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), now: T0 + 2 });
      expect(other.kind).toBe('existing');
      const retry = { ...req, token: randomUUID(), id: randomUUID(), now: T0 + 2 };
      const record = await claimed(retry);
      expect(record.id).toBe(req.id);
      expect(record.status).toBe('in_progress');
      expect(record.response).toBeNull();
    });

    it('a final failure is not claimable: it is returned for replay, response intact', async () => {
      const req = request();
      await claimed(req);
      const declined: Outcome = {
        status: 'failed',
        retryable: false,
        resultId: 'ch_declined',
        response: {
          status: 402,
          headers: [['content-type', 'application/problem+json']],
          body: new TextEncoder().encode('{"declined":true}'),
        },
      };
      await complete(req, declined);
      const again = await store.claim({ ...req, token: randomUUID(), now: T0 + LEASE * 2 });
      expect(again.kind).toBe('existing');
      expect(plain(again.record)).toEqual(plain({ ...again.record, ...declined }));
    });

    it('an expired record is claimable by any payload, with a fresh id', async () => {
      const req = request();
      await claimed(req);
      await complete(req, succeeded);
      const fresh = { ...req, fingerprint: 'e'.repeat(64), token: randomUUID(), id: randomUUID(), now: T0 + TTL };
      const record = await claimed(fresh);
      expect(record.id).toBe(fresh.id);
      expect(record.fingerprint).toBe(fresh.fingerprint);
      expect(record.response).toBeNull();
    });

    it('a response of exactly the declared maxResponseBytes is stored and read back byte for byte', async (context) => {
      const limit = store.maxResponseBytes;
      if (limit === undefined) return context.skip('the store declares no limit of its own');
      const headers: Array<[string, string]> = [
        ['content-type', 'application/octet-stream'],
        ['link', '<https://api.example.test/v1/charges?page=2>; rel="next"'],
        ['etag', '"\\v1"'],
      ];
      const utf8 = new TextEncoder();
      const headerBytes = headers.reduce(
        (sum, [n, v]) => sum + utf8.encode(n).byteLength + utf8.encode(v).byteLength,
        0,
      );
      const body = Uint8Array.from({ length: limit - headerBytes }, (_, i) => (i * 7) % 256);
      const req = request();
      const record = await claimed(req);
      const outcome: Outcome = {
        status: 'succeeded',
        retryable: false,
        resultId: 'ch_big',
        response: { status: 200, headers, body },
      };
      expect(await complete(req, outcome)).toEqual({ ok: true });
      const stored = await store.get(req.pk);
      expect(stored?.response?.body.byteLength).toBe(limit - headerBytes);
      expect(Buffer.compare(Buffer.from(stored?.response?.body ?? []), Buffer.from(body))).toBe(0);
      expect({ ...stored, response: { ...stored?.response, body: null } }).toEqual({
        ...record,
        ...outcome,
        response: { status: 200, headers, body: null },
      });
    });

    it('sweep removes only expired records', async () => {
      const expired = [request(), request(), request()];
      const live = [request({ now: T0 + TTL }), request({ now: T0 + TTL })];
      for (const r of [...expired, ...live]) await claimed(r);
      expect(await store.sweep({ now: T0 + TTL, batchSize: 2 })).toBe(3);
      for (const r of expired) expect(await store.get(r.pk)).toBeNull();
      for (const r of live) expect((await store.get(r.pk))?.token).toBe(r.token);
      expect(await store.sweep({ now: T0 + TTL })).toBe(0);
    });

    it('list returns one scope’s records, newest claim first', async () => {
      const a = request({ now: T0 });
      const b = request({ now: T0 + 1 });
      const other = request({ scope: 'acct_other' });
      for (const r of [a, b]) await claimed(r);
      await claimed({ ...other, scope: 'acct_other' });
      const listed = await store.list({ scope, limit: 10 });
      expect(listed.map((r) => r.key)).toEqual([b.key, a.key]);
      expect((await store.list({ scope, limit: 1 })).map((r) => r.key)).toEqual([b.key]);
    });

    it('the engine meets the round-trip budget: new 2, replay 1, conflict 1, mismatch 1', async () => {
      const clock = manualClock(T0);
      const engine = createEngine({ store, clock, leaseMs: LEASE, ttlMs: 24 * 3_600_000 });
      const run = { scope, key: randomUUID(), fingerprint: 'a'.repeat(64) };
      const ok = { response: { status: 201, headers: [], body: new Uint8Array([1, 2, 3]) } };
      let trips = store.roundTrips;
      const measure = () => {
        const now = store.roundTrips;
        const delta = now - trips;
        trips = now;
        return delta;
      };
      await engine.run(run, async () => ok);
      expect(measure()).toBe(2);
      const replay = await engine.run(run, async () => ok);
      expect(replay.replayed).toBe(true);
      expect(measure()).toBe(refusedClaimTrips);
      await expect(engine.run({ ...run, fingerprint: 'b'.repeat(64) }, async () => ok)).rejects.toMatchObject({
        code: 'FINGERPRINT_MISMATCH',
      });
      expect(measure()).toBe(refusedClaimTrips);

      const slow = { ...run, key: randomUUID() };
      let release = () => {};
      let started = () => {};
      const running = new Promise<void>((resolve) => (started = resolve));
      const first = engine.run(slow, () => {
        started(); // the claim has landed: the work runs under it
        return new Promise((resolve) => (release = () => resolve(ok)));
      });
      await running;
      measure();
      await expect(engine.run(slow, async () => ok)).rejects.toMatchObject({ code: 'IN_FLIGHT', retryAfterMs: LEASE });
      expect(measure()).toBe(refusedClaimTrips);
      release();
      await first;
    });
  });
}
export * from './adapter.js';
