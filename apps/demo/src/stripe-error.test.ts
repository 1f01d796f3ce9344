import { problem } from 'idem/http';
import { describe, expect, it } from 'vitest';
import { stripeErrorOf, stripeProblem, withStripeError } from './stripe-error.js';

const doc = (slug: string, status: number, extra: Record<string, unknown> = {}) => ({
  type: `urn:idem:problem:${slug}`,
  title: 'Title',
  status,
  ...extra,
});

describe('stripeErrorOf', () => {
  it("maps each problem to Stripe's error type; the code is the slug in snake case unless the problem has one", () => {
    expect(
      [
        doc('idempotency-key-reused', 400, { detail: 'Reused.' }),
        doc('idempotency-key-in-use', 409),
        doc('idempotency-lease-lost', 409),
        doc('idempotency-key-invalid', 400),
        doc('parameter-invalid', 400, { detail: 'Bad amount.', param: 'amount' }),
        doc('card-declined', 402, { detail: 'Declined.', code: 'card_declined', charge: 'ch_1' }),
        doc('unauthorized', 401),
        doc('rate-limited', 429),
        doc('idempotency-store-unavailable', 503),
        doc('internal-error', 500),
      ].map(stripeErrorOf),
    ).toEqual([
      { type: 'idempotency_error', code: 'idempotency_key_reused', message: 'Reused.' },
      { type: 'idempotency_error', code: 'idempotency_key_in_use', message: 'Title' },
      { type: 'idempotency_error', code: 'idempotency_lease_lost', message: 'Title' },
      { type: 'invalid_request_error', code: 'idempotency_key_invalid', message: 'Title' },
      { type: 'invalid_request_error', code: 'parameter_invalid', message: 'Bad amount.', param: 'amount' },
      { type: 'card_error', code: 'card_declined', message: 'Declined.', charge: 'ch_1' },
      { type: 'invalid_request_error', code: 'unauthorized', message: 'Title' },
      { type: 'rate_limit_error', code: 'rate_limited', message: 'Title' },
      { type: 'api_error', code: 'idempotency_store_unavailable', message: 'Title' },
      { type: 'api_error', code: 'internal_error', message: 'Title' },
    ]);
  });
});

describe('withStripeError', () => {
  it('adds `error` after the problem members, keeping status and headers (but a stale Content-Length)', async () => {
    const first = problem({
      status: 409,
      slug: 'idempotency-key-in-use',
      title: 'Request in progress',
      detail: 'Retry later.',
      headers: { 'retry-after': '1', 'idempotent-replayed': 'true', 'content-length': '999' },
    });
    const answer = await withStripeError(first);
    expect([answer.status, [...answer.headers]]).toEqual([
      409,
      [
        ['cache-control', 'no-store'],
        ['content-type', 'application/problem+json'],
        ['idempotent-replayed', 'true'],
        ['retry-after', '1'],
      ],
    ]);
    expect(await answer.text()).toBe(
      '{"type":"urn:idem:problem:idempotency-key-in-use","title":"Request in progress","status":409,' +
        '"detail":"Retry later.","error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"Retry later."}}',
    );
  });

  it('leaves alone what is not a problem, a problem that is not a JSON object, and one that has `error`', async () => {
    const charge = Response.json({ id: 'ch_1' }, { status: 201 });
    expect(await withStripeError(charge)).toBe(charge);
    const head = new Response(null, { status: 404, headers: { 'content-type': 'application/problem+json' } });
    expect(await withStripeError(head)).toBe(head);
    const texts = [
      'not json',
      '[1]',
      '{"title":"no type","status":400}',
      '{"type":"t","title":"x","status":400,"error":1}',
    ];
    for (const text of texts) {
      const answer = await withStripeError(
        new Response(text, { status: 400, headers: { 'content-type': 'application/problem+json' } }),
      );
      expect([answer.status, answer.headers.get('content-type'), await answer.text()]).toEqual([
        400,
        'application/problem+json',
        text,
      ]);
    }
  });

  it('gives a replay the same bytes as the first answer: the stored body is the same, and so is the result', async () => {
    const stored = () =>
      problem({ status: 402, slug: 'card-declined', title: 'Card declined', extensions: { code: 'card_declined' } });
    const [a, b] = await Promise.all([withStripeError(stored()), withStripeError(stored())]);
    expect(await a.text()).toBe(await b.text());
  });
});

describe('stripeProblem', () => {
  it('is problem() with the `error` member, for answers made before the app runs', async () => {
    const unauthorized = { status: 401, slug: 'unauthorized', title: 'Unauthorized', detail: 'Send a key.' };
    const answer = stripeProblem({ ...unauthorized, headers: { 'www-authenticate': 'Bearer' } });
    expect([answer.status, answer.headers.get('www-authenticate'), await answer.json()]).toEqual([
      401,
      'Bearer',
      {
        type: 'urn:idem:problem:unauthorized',
        title: 'Unauthorized',
        status: 401,
        detail: 'Send a key.',
        error: { type: 'invalid_request_error', code: 'unauthorized', message: 'Send a key.' },
      },
    ]);
    // Already carrying `error`, it passes through withStripeError unchanged.
    const tooLarge = () => stripeProblem({ status: 413, slug: 'request-too-large', title: 'Too large' });
    expect(await (await withStripeError(tooLarge())).text()).toBe(await tooLarge().text());
  });
});
