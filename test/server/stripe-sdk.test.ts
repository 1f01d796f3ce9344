/**
 * The official `stripe` SDK against the demo (issue 32, item 8): it speaks Stripe's wire format — form bodies in
 * bracket notation, its own Idempotency-Key on every POST, retries on a lost connection — and reads errors from
 * the `error` member. The SDK talks to the demo process through a TCP proxy that can drop an answer after the
 * server wrote it (the work committed), the failure its retries exist for.
 */
import { randomUUID } from 'node:crypto';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFaultProxy, type FaultProxy } from '../fault-proxy.js';
import { api, startDemo, tempDir, type DemoProcess } from '../harness.js';

const KEY = 'sk_live_stripe_sdk';
const MISMATCH = 'This Idempotency-Key was already used with a different request (method, path, query or body).';

describe('the official stripe SDK against the demo, through a proxy that loses answers', () => {
  const dir = tempDir();
  let server: DemoProcess;
  let proxy: FaultProxy;
  let stripe: Stripe;
  let demo: ReturnType<typeof api>;
  beforeAll(async () => {
    server = await startDemo({
      IDEM_STORE: `sqlite:${dir.path}/idem.db`,
      IDEM_LAB: '0',
      IDEM_API_KEYS: `${KEY}:acct_sdk,sk_live_other:acct_other`,
    });
    const { hostname, port } = new URL(server.url);
    proxy = await startFaultProxy(hostname, Number(port));
    stripe = new Stripe(KEY, {
      host: '127.0.0.1',
      port: proxy.port,
      protocol: 'http',
      maxNetworkRetries: 2,
      telemetry: false,
    });
    demo = api(server.url, KEY);
  });
  afterAll(async () => {
    await proxy.close();
    await server.stop();
    dir.remove();
  });

  /** The account's idempotency records, as `GET /v1/idempotency_records` lists them. */
  const records = async () =>
    ((await (await demo.get('/v1/idempotency_records')).json()) as { data: Array<Record<string, unknown>> }).data;

  it('the first answer is lost after the commit: the SDK retries with its own key, gets its charge, and one is made', async () => {
    const before = await demo.balance();
    const dropped = proxy.dropNextAnswer();
    const charge = await stripe.charges.create({
      amount: 2000,
      currency: 'usd',
      source: 'tok_visa',
      metadata: { order_id: '42' },
    });
    await dropped;
    expect(proxy.dropped).toBe(1);
    expect([charge.object, charge.amount, charge.currency, charge.status]).toEqual([
      'charge',
      2000,
      'usd',
      'succeeded',
    ]);
    // The answer came from the record the first attempt left: the SDK's retry was a replay, not a second charge.
    expect(charge.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(await demo.balance()).toEqual({
      object: 'balance',
      charged: before.charged + 2000,
      count: before.count + 1,
    });
    expect((await demo.charges()).data.filter((c) => c.amount === 2000).map((c) => c.id)).toEqual([charge.id]);
    const record = (await records()).find((r) => r.resultId === charge.id);
    expect([record?.status, record?.responseStatus, String(record?.key).startsWith('stripe-node-retry-')]).toEqual([
      'succeeded',
      201,
      true,
    ]);
  });

  it('the same key again replays the charge; with another amount it is a StripeIdempotencyError, and nothing is charged', async () => {
    const key = randomUUID();
    const params = { amount: 1500, currency: 'eur', source: 'tok_mastercard' };
    const first = await stripe.charges.create(params, { idempotencyKey: key });
    const again = await stripe.charges.create(params, { idempotencyKey: key });
    expect([again.id, again.lastResponse.headers['idempotent-replayed']]).toEqual([first.id, 'true']);
    const before = await demo.balance();
    const refused: unknown = await stripe.charges.create({ ...params, amount: 9900 }, { idempotencyKey: key }).then(
      () => 'charged',
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    const error = refused as Stripe.errors.StripeIdempotencyError;
    expect([error.statusCode, error.rawType, error.code, error.message]).toEqual([
      400,
      'idempotency_error',
      'idempotency_key_reused',
      MISMATCH,
    ]);
    expect(await demo.balance()).toEqual(before);
  });

  it('a refused charge is a typed error naming its field; a declined card a StripeCardError with its charge', async () => {
    const failed = (promise: Promise<unknown>) =>
      promise.then(
        () => undefined,
        (error: unknown) => error as Stripe.errors.StripeError,
      );
    const before = await demo.balance();
    const rows = (await demo.charges()).data.length;
    const invalid = await failed(stripe.charges.create({ amount: 0, currency: 'usd' }));
    expect(invalid).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect([invalid?.statusCode, invalid?.code, invalid?.param, invalid?.message]).toEqual([
      400,
      'parameter_invalid',
      'amount',
      '`amount` must be an integer number of cents from 1 to 99999999.',
    ]);
    const declined = await failed(
      stripe.charges.create({ amount: 700, currency: 'usd', source: 'tok_chargeDeclined' }),
    );
    expect(declined).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect([declined?.statusCode, declined?.code, declined?.message]).toEqual([
      402,
      'card_declined',
      'The card was declined.',
    ]);
    const row = (await (await demo.get(`/v1/charges/${String(declined?.charge)}`)).json()) as Record<string, unknown>;
    expect([row.amount, row.status, row.failure_code]).toEqual([700, 'failed', 'card_declined']);
    const stranger = await failed(
      new Stripe('sk_live_nobody', { host: '127.0.0.1', port: proxy.port, protocol: 'http' }).charges.list(),
    );
    expect([stranger?.constructor, stranger?.statusCode]).toEqual([Stripe.errors.StripeAuthenticationError, 401]);
    // The declined charge is the one new row, failed, which the balance does not count; the refused one made none.
    expect([await demo.balance(), (await demo.charges()).data.length]).toEqual([before, rows + 1]);
  });

  it('a form body with its fields reordered is the same request; the answer stays an RFC 9457 problem with `error`', async () => {
    const post = (body: string, key: string) =>
      fetch(`${server.url}/v1/charges`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${KEY}`,
          'content-type': 'application/x-www-form-urlencoded',
          'idempotency-key': key,
        },
        body,
      });
    const key = randomUUID();
    const before = await demo.balance();
    const first = await post('currency=gbp&amount=333&metadata[a]=1&metadata[b]=2', key);
    // Fields of one root (metadata[a], metadata[b]) keep their order: qs could read another order differently.
    const reordered = await post('metadata[a]=1&amount=333&metadata[b]=2&currency=gbp', key);
    expect([first.status, reordered.status, reordered.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true']);
    expect(await reordered.text()).toBe(await first.text());
    expect(await demo.balance()).toEqual({ object: 'balance', charged: before.charged + 333, count: before.count + 1 });
    const changed = await post('currency=gbp&amount=333&metadata[a]=1&metadata[b]=3', key);
    expect([changed.status, changed.headers.get('content-type'), await changed.json()]).toEqual([
      400,
      'application/problem+json',
      {
        type: 'urn:idem:problem:idempotency-key-reused',
        title: 'Idempotency-Key reused',
        status: 400,
        detail: MISMATCH,
        error: { type: 'idempotency_error', code: 'idempotency_key_reused', message: MISMATCH },
      },
    ]);
    expect(await demo.balance()).toEqual({ object: 'balance', charged: before.charged + 333, count: before.count + 1 });
  });
});
