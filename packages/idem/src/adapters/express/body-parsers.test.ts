/**
 * `idempotency()` mounted after Express's own body parsers (`app.use(express.json())` first, the usual layout):
 * a charge, a byte-identical replay, a mismatch 400 and never a 500, with each of express.json(), urlencoded(),
 * text() and raw(); the exact bytes through `rawBody`; a body read by something else answered 500 with the fix.
 */
import type { AddressInfo } from 'node:net';
import express, { type RequestHandler } from 'express';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { recordPk } from '../../core/key.js';
import { memoryStore } from '../../stores/memory/index.js';
import { idempotency, rawBody } from './index.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** An app with `parsers` mounted before Idem, and a route that answers what it parsed, counting its runs. */
async function serve(parsers: RequestHandler[], options: { maxBodyBytes?: number } = {}) {
  const store = memoryStore();
  const runs = { count: 0 };
  const app = express();
  app.set('env', 'production');
  for (const parser of parsers) app.use(parser);
  const guard = idempotency({ store, scope: 'single-tenant', onError: () => {}, ...options });
  app.use(guard);
  app.post(
    '/v1/charges',
    guard.route(async (req, res) => {
      runs.count++;
      const body: unknown = req.body;
      res.status(201).json({ id: `ch_${runs.count}`, got: Buffer.isBuffer(body) ? body.toString('hex') : body });
    }),
  );
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`;
  const send = async (key: string, type: string, body: string | Uint8Array<ArrayBuffer>) => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': type },
      body,
    });
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed'),
      body: await response.text(),
    };
  };
  const fingerprintOf = async (key: string) => (await store.get(recordPk('single-tenant', key)))?.fingerprint;
  return { send, runs, fingerprintOf };
}

const JSON_TYPE = 'application/json';
const FORM = 'application/x-www-form-urlencoded';
/** What a reused key with another body gets: the mismatch problem, not a replay. */
const mismatch = (): unknown =>
  expect.objectContaining({
    status: 400,
    replayed: null,
    body: expect.stringContaining('idempotency-key-reused') as unknown,
  });

describe('Express: idempotency() after a body parser', () => {
  it('express.json(): charge, byte-identical replay (key order and spaces do not count), mismatch 400', async () => {
    const { send, runs } = await serve([express.json()]);
    const first = await send('k-json', JSON_TYPE, '{"amount":500,"currency":"usd"}');
    expect(first).toEqual({
      status: 201,
      replayed: null,
      body: '{"id":"ch_1","got":{"amount":500,"currency":"usd"}}',
    });
    expect(await send('k-json', JSON_TYPE, '{"amount":500,"currency":"usd"}')).toEqual({ ...first, replayed: 'true' });
    expect(await send('k-json', JSON_TYPE, '{ "currency": "usd", "amount": 5e2 }')).toEqual({
      ...first,
      replayed: 'true',
    });
    expect(await send('k-json', JSON_TYPE, '{"amount":501,"currency":"usd"}')).toEqual(mismatch());
    expect(runs.count).toBe(1);
  });

  it('express.json() gives the fingerprint idempotency() before it gives: a layout change keeps retries', async () => {
    const after = await serve([express.json()]);
    const before = await serve([]);
    const body = '{"b":[1,2.50,{"y":true,"x":null}],"a":"\\u00e9"}';
    expect((await after.send('k-same', JSON_TYPE, body)).status).toBe(201);
    expect((await before.send('k-same', JSON_TYPE, body)).status).toBe(201);
    expect(await after.fingerprintOf('k-same')).toMatch(/^[0-9a-f]{64}$/);
    expect(await after.fingerprintOf('k-same')).toBe(await before.fingerprintOf('k-same'));
  });

  it('express.urlencoded(): field order does not count, repeated fields keep theirs, another value is 400', async () => {
    const { send, runs } = await serve([express.urlencoded()]);
    const first = await send('k-form', FORM, 'amount=500&currency=usd&tag=a&tag=b');
    expect(first).toEqual({
      status: 201,
      replayed: null,
      body: '{"id":"ch_1","got":{"amount":"500","currency":"usd","tag":["a","b"]}}',
    });
    expect(await send('k-form', FORM, 'tag=a&currency=usd&tag=b&amount=500')).toEqual({ ...first, replayed: 'true' });
    expect(await send('k-form', FORM, 'amount=500&currency=usd&tag=b&tag=a')).toEqual(mismatch());
    expect(await send('k-form', FORM, 'amount=501&currency=usd&tag=a&tag=b')).toEqual(mismatch());
    expect(runs.count).toBe(1);
  });

  it('express.json({ strict: false }): a JSON string is not the JSON value it spells (1 vs "1", [5] vs "[5]")', async () => {
    const { send, runs } = await serve([express.json({ strict: false })]);
    const cases = [
      ['{"amount":100}', '"{\\"amount\\":100}"', '{"id":"ch_1","got":{"amount":100}}'],
      ['1', '"1"', '{"id":"ch_2","got":1}'],
      ['[5]', '"[5]"', '{"id":"ch_3","got":[5]}'],
      ['"1"', '1', '{"id":"ch_4","got":"1"}'],
    ];
    for (const [index, [value, spelled, answer]] of cases.entries()) {
      const first = await send(`k-strict-${index}`, JSON_TYPE, value as string);
      expect(first).toEqual({ status: 201, replayed: null, body: answer });
      expect(await send(`k-strict-${index}`, JSON_TYPE, spelled as string)).toEqual(mismatch());
      expect(await send(`k-strict-${index}`, JSON_TYPE, value as string)).toEqual({ ...first, replayed: 'true' });
    }
    expect(runs.count).toBe(4);
  });

  it('a parsed form is a form, never JSON: JSON then a form of the same fields is 400 in either layout', async () => {
    const parsers = [express.json(), express.urlencoded({ extended: true })];
    for (const { send, runs } of [await serve(parsers), await serve([])]) {
      expect((await send('k-kind', JSON_TYPE, '{"a":"1"}')).status).toBe(201);
      expect(await send('k-kind', FORM, 'a=1')).toEqual(mismatch());
      const form = await send('k-kind-form', FORM, 'b=2&a=1');
      expect([form.status, form.replayed]).toEqual([201, null]);
      expect(await send('k-kind-form', FORM, 'a=1&b=2')).toEqual({ ...form, replayed: 'true' });
      expect(await send('k-kind-form', JSON_TYPE, '{"a":"1","b":"2"}')).toEqual(mismatch());
      // qs reads `a=1&a[]=2` as ["1","2"] and `a[]=2&a=1` as ["2","1"]; `&` inside a value is not a field break.
      expect((await send('k-kind-qs', FORM, 'a=1&a[]=2')).status).toBe(201);
      expect(await send('k-kind-qs', FORM, 'a[]=2&a=1')).toEqual(mismatch());
      expect((await send('k-kind-amp', FORM, 'a=1%26b%3D2')).status).toBe(201);
      expect(await send('k-kind-amp', FORM, 'a=1&b=2')).toEqual(mismatch());
      expect(runs.count).toBe(4);
    }
  });

  it('express.text() and express.raw(): the text and the bytes as they are', async () => {
    const { send, runs } = await serve([express.text(), express.raw()]);
    const text = await send('k-text', 'text/plain', 'charge 500 usd');
    expect(text).toEqual({ status: 201, replayed: null, body: '{"id":"ch_1","got":"charge 500 usd"}' });
    expect(await send('k-text', 'text/plain', 'charge 500 usd')).toEqual({ ...text, replayed: 'true' });
    expect(await send('k-text', 'text/plain', 'charge 501 usd')).toEqual(mismatch());
    const bytes = Uint8Array.from([0, 1, 2, 255]);
    const raw = await send('k-raw', 'application/octet-stream', bytes);
    expect(raw).toEqual({ status: 201, replayed: null, body: '{"id":"ch_2","got":"000102ff"}' });
    expect(await send('k-raw', 'application/octet-stream', bytes)).toEqual({ ...raw, replayed: 'true' });
    expect(await send('k-raw', 'application/octet-stream', Uint8Array.from([0, 1, 2, 254]))).toEqual(mismatch());
    expect(runs.count).toBe(2);
  });

  it('a parser that skips the type leaves the stream to idempotency(), which reads it as before', async () => {
    const { send, runs } = await serve([express.json()]);
    const first = await send('k-skip', 'application/xml', '<charge amount="500"/>');
    expect([first.status, first.replayed]).toEqual([201, null]);
    expect(await send('k-skip', 'application/xml', '<charge amount="500"/>')).toEqual({ ...first, replayed: 'true' });
    expect(await send('k-skip', 'application/xml', '<charge amount="501"/>')).toEqual(mismatch());
    expect(runs.count).toBe(1);
  });

  it('rawBody (or a Buffer in req.rawBody) keeps the bytes: numbers past a double are told apart', async () => {
    const parsed = await serve([express.json()]);
    const kept = await serve([express.json({ verify: rawBody })]);
    const own = await serve([
      express.json({ verify: (req, _res, buf) => ((req as unknown as { rawBody?: Buffer }).rawBody = buf) }),
    ]);
    for (const { send } of [parsed, kept, own])
      expect((await send('k-big', JSON_TYPE, '{"n":9007199254740993}')).status).toBe(201);
    // req.body alone holds the same double for both: the handler could not tell them apart either.
    expect((await parsed.send('k-big', JSON_TYPE, '{"n":9007199254740992}')).replayed).toBe('true');
    expect(await kept.send('k-big', JSON_TYPE, '{"n":9007199254740992}')).toEqual(mismatch());
    expect(await own.send('k-big', JSON_TYPE, '{"n":9007199254740992}')).toEqual(mismatch());
    expect([parsed.runs.count, kept.runs.count, own.runs.count]).toEqual([1, 1, 1]);
  });

  it('the parsed body counts against maxBodyBytes: 413', async () => {
    const { send, runs } = await serve([express.json()], { maxBodyBytes: 16 });
    expect((await send('k-big-body', JSON_TYPE, '{"amount":500,"currency":"usd"}')).status).toBe(413);
    expect(runs.count).toBe(0);
  });

  it('a body read by something else (multipart, or a stream consumer) is 500 with the fix, once in the log', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      // As a multipart parser does: the stream read, the text fields in req.body, the files elsewhere.
      const multipart: RequestHandler = (req, _res, next) => {
        req.resume();
        req.once('end', () => {
          (req as { body?: unknown }).body = { amount: '500' };
          next();
        });
      };
      const { send, runs } = await serve([multipart]);
      const type = 'multipart/form-data; boundary=x';
      const answer = await send('k-multi', type, '--x--');
      const fix =
        'Mount idempotency() before it, or keep the bytes with its verify hook: express.json({ verify: rawBody }).';
      expect([answer.status, JSON.parse(answer.body)]).toEqual([
        500,
        {
          type: 'urn:idem:problem:internal-error',
          title: 'Internal server error',
          status: 500,
          detail: `idem/express: the request body was read by a multipart parser, which left no copy Idem can fingerprint. ${fix}`,
        },
      ]);
      expect((await send('k-multi', type, '--x--')).status).toBe(500);
      const other = await send('k-other', 'application/vnd.custom', 'x');
      expect(JSON.parse(other.body)).toMatchObject({
        status: 500,
        detail: `idem/express: the request body was read by a middleware mounted before idempotency(), which left no copy Idem can fingerprint. ${fix}`,
      });
      expect(runs.count).toBe(0);
      expect(warn.mock.calls).toEqual([
        [
          `idem/express: the request body was read by a multipart parser, which left no copy Idem can fingerprint. ${fix}`,
          { type: 'IdemWarning', code: 'IDEM_BODY_READ' },
        ],
      ]);
    } finally {
      warn.mockRestore();
    }
  });
});
