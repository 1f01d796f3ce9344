/**
 * A key keeps the takeover policy of its first attempt (lab-pin.ts): after a crash under one `Idem-Lab-Takeover`, a
 * retry of the same key under another is refused 400 `parameter-invalid` naming the first, and changes nothing — no
 * takeover, no charge, no history entry, the record as it was. So a quarantined key is never run again by a retry
 * that asks for `'rerun'`, also after a server restart (the first policy is read from the lab history).
 */
import { describe, expect, it } from 'vitest';
import { recordPk } from 'idem';
import { ACCOUNT } from './lab-journal.test-kit.js';
import { lab, switches } from './lab-takeover.test-kit.js';

const refusal = async (answer: Response) => {
  const body = (await answer.json()) as { type: string; param: string; first: string; detail: string };
  return [answer.status, answer.headers.get('content-type'), body.type, body.param, body.first, body.detail];
};
/** The 409 of a quarantined key: the sentence the lab's 'never re-runs' stands on. */
const UNKNOWN =
  'An earlier attempt with this Idempotency-Key stopped before recording its outcome, which is unknown. ' +
  'It will not be run again; an operator resolves it (idem records resolve).';
/** The refusal of a charge sent under `asked` for a key first sent under `first`, as `refusal` reads it. */
const refused = (first: string, asked: string) => [
  400,
  'application/problem+json',
  'urn:idem:problem:parameter-invalid',
  'Idem-Lab-Takeover',
  first,
  `This Idempotency-Key was first sent with \`Idem-Lab-Takeover: ${first}\`; a key keeps the takeover policy of its first attempt, so this request (\`${asked}\`) was not run: nothing changed.`,
];

describe('a key keeps the takeover policy of its first attempt', () => {
  it("quarantined after a crash: a retry under 'rerun' is refused 400 and charges nothing — one row", async () => {
    const { charge, history, rows, crashed, store } = await lab(true);
    await crashed('k', 'quarantine', 'keyless');
    const quarantined = await charge('k', switches('quarantine', 'keyless'));
    const body = (await quarantined.json()) as { operation_state: string; detail: string };
    expect([quarantined.status, body.operation_state, body.detail]).toEqual([409, 'unknown', UNKNOWN]);
    const before = await store.get(recordPk(ACCOUNT, 'k'));
    const rerun = await charge('k', switches('rerun', 'keyless'));
    expect(await refusal(rerun)).toEqual(refused('quarantine', 'rerun'));
    // No header is the default, 'rerun': refused as well.
    expect(await refusal(await charge('k', { 'idem-lab-processor': 'keyless' }))).toEqual(
      refused('quarantine', 'rerun'),
    );
    expect(rows()).toHaveLength(1);
    expect(await store.get(recordPk(ACCOUNT, 'k'))).toEqual(before);
    expect(before?.status).toBe('in_progress');
    const { entries } = await history();
    expect(entries.map((e) => [e.claim, e.takeover?.takeover, e.answer?.status ?? null])).toEqual([
      ['fresh', 'quarantine', null],
      ['refused', 'quarantine', 409],
    ]);
    // The first policy still answers as before: 409 unknown, nothing run.
    expect((await charge('k', switches('quarantine', 'keyless'))).status).toBe(409);
    expect(rows()).toHaveLength(1);
  });

  it.each([
    ['rerun', 'quarantine'],
    ['rerun', 'reconcile'],
    ['reconcile', 'rerun'],
    ['reconcile', 'quarantine'],
    ['quarantine', 'reconcile'],
  ])(
    "first under '%s', a retry under '%s' after the lapse: 400 naming the first, nothing taken over",
    async (first, then) => {
      const { charge, history, rows, crashed, store } = await lab(false);
      const record = await crashed('k', first, 'keyless');
      expect(await refusal(await charge('k', switches(then, 'keyless')))).toEqual(refused(first, then));
      expect(await store.get(recordPk(ACCOUNT, 'k'))).toEqual(record);
      expect([rows().length, (await history()).entries.length]).toEqual([1, 1]);
    },
  );

  it('a refused retry that asks for a crash is answered, not cut (nothing ran)', async () => {
    const { app, request, rows, crashed } = await lab(true);
    await crashed('k', 'quarantine', 'keyless');
    const retry = request('k', { ...switches('rerun', 'keyless'), 'idem-lab-fault': 'crash' });
    expect([(await app(retry)).status, app.dropsAfterCommit(retry), rows().length]).toEqual([400, false, 1]);
  });

  it("after a server restart the key still keeps 'quarantine': the new process refuses 'rerun' — no charge", async () => {
    const { rows, crashed, restart } = await lab(true);
    await crashed('k', 'quarantine', 'keyed');
    const next = await restart();
    const answer = await next.charge('k', switches('rerun', 'keyed'));
    expect(await refusal(answer)).toEqual(refused('quarantine', 'rerun'));
    expect(rows()).toHaveLength(0);
    expect((await next.charge('k', switches('quarantine', 'keyed'))).status).toBe(409);
    expect((await next.history()).entries.map((e) => [e.claim, e.takeover?.takeover])).toEqual([
      ['fresh', 'quarantine'],
      ['refused', 'quarantine'],
    ]);
  });

  it('another key picks its own policy; the same policy on a retry runs as before', async () => {
    const { charge, rows, crashed } = await lab(true);
    await crashed('a', 'quarantine', 'keyless');
    await crashed('b', 'rerun', 'keyless');
    expect((await charge('b', switches('rerun', 'keyless'))).status).toBe(201);
    expect(rows()).toHaveLength(3);
  });
});
