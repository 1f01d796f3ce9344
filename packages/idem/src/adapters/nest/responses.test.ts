/**
 * `idem/nest` answers that do not come back through Nest's return path: a route answering through `@Res()`, a
 * second answer after the first end, an Observable Nest tears down when its client goes away, a StreamableFile
 * cut mid-body.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { IdempotencyInterceptor } from './index.js';
import { available, newRef, useNestApps } from './serve.test-kit.js';

describe.skipIf(!available)('idem/nest', () => {
  const { onEachPlatform } = useNestApps();

  onEachPlatform((served) => {
    it('a route that answers through @Res() is recorded and replayed too (Nest sends nothing for it)', async () => {
      const { ref, first, retry } = await served.twice('/v1/raw', 1);
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
      const { ref, first, retry, record } = await served.twice('/v1/raw-then-throw', 1);
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
  });
});
