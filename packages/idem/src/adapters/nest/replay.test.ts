/**
 * `idem/nest` replays: a keyed request runs once and its retry gets the exact bytes; a duplicate in flight is
 * refused; another body under the key is refused, a field the route excludes is not; a thrown `HttpException` is
 * the recorded answer. On Express and on Fastify, over real HTTP against PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { IdempotencyInterceptor } from './index.js';
import { available, newRef, useNestApps } from './serve.test-kit.js';

describe.skipIf(!available)('idem/nest', () => {
  const { onEachPlatform } = useNestApps();

  onEachPlatform((served) => {
    it('the store reaches the interceptor through dependency injection', () => {
      expect(served.app.get(IdempotencyInterceptor).engine.store).toBe(served.store);
    });

    it('runs once, commits one ledger row, and replays the exact bytes marked Idempotent-Replayed', async () => {
      const { ref, first, retry, record } = await served.twice('/v1/charges', 500);
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

    it('a thrown HttpException(402) is the recorded answer: final, replayed byte for byte, no ledger row', async () => {
      const { ref, first, retry, record } = await served.twice('/v1/charges', 402);
      expect([first.status, first.text]).toEqual([402, `{"error":"card_declined","ref":"${ref}"}`]);
      expect([retry.status, retry.text, retry.headers.get('idempotent-replayed')]).toEqual([402, first.text, 'true']);
      expect([record?.status, record?.retryable, served.work.runs.get(ref), await served.ledger(ref)]).toEqual([
        'failed',
        false,
        1,
        0,
      ]);
    });
  });
});
