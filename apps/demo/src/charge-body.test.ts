import { describe, expect, it } from 'vitest';
import { MAX_FORM_FIELDS, parseCharge } from './charge-body.js';

const FORM = 'application/x-www-form-urlencoded';
const utf8 = (text: string) => new TextEncoder().encode(text);

/** The parsed charge, or `[status, problem body]` for a refusal. */
async function read(body: string | Uint8Array, contentType: string | null) {
  const parsed = parseCharge(typeof body === 'string' ? utf8(body) : body, contentType);
  return parsed instanceof Response ? [parsed.status, await parsed.json()] : parsed;
}

const invalid = (param: string, detail: string) => [
  400,
  { type: 'urn:idem:problem:parameter-invalid', title: 'Invalid parameter', status: 400, detail, param },
];

describe('parseCharge: a form body (Stripe wire format)', () => {
  it('reads amount as digits, currency and source; bracket fields and others are accepted and unused', async () => {
    expect(await read('amount=2000&currency=eur&source=tok_mastercard&metadata[order_id]=42', FORM)).toEqual({
      amount: 2000,
      currency: 'eur',
      source: 'tok_mastercard',
    });
    expect(
      await read(
        'metadata%5Border_id%5D=42&description=a+b&amount=0500',
        'Application/X-WWW-Form-Urlencoded; charset=utf-8',
      ),
    ).toEqual({ amount: 500, currency: 'usd', source: 'tok_visa' });
    expect(await read('%61mount=7&&', FORM)).toEqual({ amount: 7, currency: 'usd', source: 'tok_visa' });
  });

  it('refuses what it cannot read as one charge, naming the field', async () => {
    expect(await read('currency=usd', FORM)).toEqual(
      invalid('amount', '`amount` is required: an integer number of cents > 0.'),
    );
    for (const amount of ['5.00', '-5', '5e2', '', '0', '100000000', 'abc', '1%2B1'])
      expect(await read(`amount=${amount}`, FORM)).toEqual(
        invalid('amount', '`amount` must be an integer number of cents from 1 to 99999999.'),
      );
    expect(await read('amount=1&amount=2', FORM)).toEqual(invalid('amount', '`amount` must be sent once.'));
    expect(await read('amount=1&currency=usd&currency=usd', FORM)).toEqual(
      invalid('currency', '`currency` must be sent once.'),
    );
    expect(await read('amount=1&source=tok_nope', FORM)).toEqual(
      invalid('source', '`source` must be one of tok_visa, tok_mastercard, tok_chargeDeclined.'),
    );
    // A bracketed `amount[x]` is another field: `amount` itself is missing.
    expect(await read('amount[x]=5', FORM)).toEqual(
      invalid('amount', '`amount` is required: an integer number of cents > 0.'),
    );
  });

  it('refuses a body that is not UTF-8, or that has more than 1,000 fields, before parsing it', async () => {
    const malformed = (detail: string) => [
      400,
      { type: 'urn:idem:problem:body-invalid', title: 'Malformed form body', status: 400, detail },
    ];
    expect(await read(Uint8Array.of(0x61, 0x3d, 0xff), FORM)).toEqual(malformed('The body must be UTF-8.'));
    const fields = (count: number) => ['amount=5', ...Array.from({ length: count - 1 }, (_, i) => `f${i}=1`)].join('&');
    expect(await read(fields(MAX_FORM_FIELDS), FORM)).toEqual({ amount: 5, currency: 'usd', source: 'tok_visa' });
    expect(await read(fields(MAX_FORM_FIELDS + 1), FORM)).toEqual(malformed('A form body has at most 1000 fields.'));
    expect(await read(`amount=5${'&'.repeat(MAX_FORM_FIELDS)}`, FORM)).toEqual(
      malformed('A form body has at most 1000 fields.'),
    );
  });
});

describe('parseCharge: JSON, for every other content type', () => {
  it('reads a JSON object whatever the type says, as before forms were read', async () => {
    for (const type of ['application/json', 'text/plain', null])
      expect(await read('{"amount":500,"currency":"gbp","metadata":{"order_id":"42"}}', type)).toEqual({
        amount: 500,
        currency: 'gbp',
        source: 'tok_visa',
      });
    expect(await read('{"amount":"500"}', 'application/json')).toEqual(
      invalid('amount', '`amount` must be an integer number of cents from 1 to 99999999.'),
    );
  });

  it('refuses a body that is not a JSON object, and JSON sent as a form', async () => {
    const malformed = [
      400,
      {
        type: 'urn:idem:problem:body-invalid',
        title: 'Malformed JSON',
        status: 400,
        detail: 'The body must be a JSON object.',
      },
    ];
    for (const body of ['[1]', 'null', '{', 'amount=500'])
      expect(await read(body, 'application/json')).toEqual(malformed);
    expect(await read('{"amount":500}', FORM)).toEqual(
      invalid('amount', '`amount` is required: an integer number of cents > 0.'),
    );
  });
});
