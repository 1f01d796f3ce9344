/**
 * The chaos checker catches what it claims to: each invariant broken on purpose in a small synthetic history.
 */
import { describe, expect, it } from 'vitest';
import {
  check,
  formatViolation,
  type Attempt,
  type History,
  type LedgerRow,
  type Operation,
  type RecordRow,
} from './checker.js';

const op: Operation = { index: 0, account: 'acct_a', key: 'k0', amount: 10_000, declined: false };
const charge = (id: string) => JSON.stringify({ id, object: 'charge', amount: 10_000 });
const attempt = (overrides: Partial<Attempt>): Attempt => ({
  op: 0,
  role: 'client',
  slot: 1,
  faults: [],
  start: 1_000,
  end: 1_010,
  outcome: 201,
  replayed: false,
  problem: null,
  body: charge('ch_1'),
  ...overrides,
});
/** Slow work (started at 1 s) answered 409: it lost its lease. */
const leaseLost = (overrides: Partial<Attempt>): Attempt =>
  attempt({ faults: ['slow'], outcome: 409, problem: 'idempotency-lease-lost', ...overrides });
const row: LedgerRow = { id: 'ch_1', account: 'acct_a', amount: 10_000, status: 'succeeded' };
const record: RecordRow = {
  key: 'k0',
  status: 'succeeded',
  resultId: 'ch_1',
  responseStatus: 201,
  retryable: null,
  leaseExpiresAt: 4_000,
};
const history = (overrides: Partial<History> = {}): History => ({
  ops: [op],
  attempts: [
    attempt({ outcome: 'network', faults: ['drop-after-commit'] }),
    attempt({ start: 1_100, end: 1_110, replayed: true }),
  ],
  ledger: [row],
  records: new Map([['acct_a', [record]]]),
  faults: [],
  readAt: 10_000,
  skews: [0, 0, 0],
  ...overrides,
});

describe('chaos checker', () => {
  it('a clean history: no violation, and the figures count what happened', () => {
    const { violations, figures } = check(history());
    expect(violations).toEqual([]);
    expect([
      figures['fault: drop-after-commit (answers dropped)'],
      figures['operations with a 5xx or dropped answer, resolved to the one charge'],
    ]).toEqual([1, 1]);
  });

  it('a second charge for one operation', () => {
    expect(check(history({ ledger: [row, { ...row, id: 'ch_2' }] })).violations).toEqual([
      'op 0 (acct_a k0): 2 charges in the ledger (expected exactly 1): ch_1, ch_2',
    ]);
  });

  it('a lost charge, and a stray one', () => {
    expect(check(history({ ledger: [{ ...row, amount: 99 }] })).violations).toEqual([
      'op 0 (acct_a k0): 0 charges in the ledger (expected exactly 1): ',
      'stray charge ch_1 (acct_a, 99)',
    ]);
  });

  it('two different accepted answers for one key', () => {
    const attempts = [attempt({}), attempt({ start: 1_200, end: 1_210, body: charge('ch_2') })];
    expect(check(history({ attempts })).violations[0]).toMatch(/^op 0 \(acct_a k0\): 2 different accepted answers/);
  });

  it('an answer hiding the committed charge behind another one (the client was told ch_9)', () => {
    const attempts = [
      attempt({ outcome: 503, problem: 'idempotency-store-unavailable' }),
      attempt({ start: 1_100, end: 1_110, body: charge('ch_9') }),
    ];
    const records = new Map([['acct_a', [{ ...record, resultId: 'ch_9' }]]]);
    expect(check(history({ attempts, records })).violations).toEqual([
      'op 0 (acct_a k0): the client was told ch_9, the ledger holds ch_1',
    ]);
  });

  it('a record left in progress, past its lease and live', () => {
    const records = new Map([
      [
        'acct_a',
        [
          record,
          { ...record, key: 'x', status: 'in_progress', leaseExpiresAt: 9_000 },
          { ...record, key: 'y', status: 'in_progress', leaseExpiresAt: 20_000 },
        ],
      ],
    ]);
    expect(check(history({ records })).violations).toEqual([
      'acct_a x: in_progress past its lease after the run quiesced',
      'acct_a y: in_progress with a live lease after the run quiesced',
    ]);
  });

  it('an operation never accepted, and a tampered retry accepted', () => {
    expect(
      check(history({ attempts: [attempt({ outcome: 409, problem: 'idempotency-key-in-use' })] })).violations[0],
    ).toBe('op 0 (acct_a k0): no answer accepted (409)');
    const tampered = [
      ...history().attempts,
      attempt({ role: 'tamper', start: 2_000, end: 2_010, outcome: 201, body: charge('ch_5') }),
    ];
    expect(check(history({ attempts: tampered })).violations).toEqual([
      'op 0 (acct_a k0): a tampered body (another amount) was accepted with 201',
    ]);
  });

  it('undisturbed slow work that lost its lease, and the probe that took it over; a fault on its process excuses it', () => {
    const slow = leaseLost({ end: 6_000 });
    const probe = attempt({ role: 'probe', slot: 2, start: 4_700, end: 4_710 });
    const lost = check(
      history({ attempts: [slow, probe, attempt({ start: 6_100, end: 6_110, replayed: true })] }),
    ).violations;
    expect(lost).toEqual([
      'op 0: undisturbed slow work lost its lease (answered 409 idempotency-lease-lost)',
      'op 0: a probe took over undisturbed slow work (201)',
    ]);
    const faults = [{ kind: 'pause', slots: [1], start: 2_000, end: 7_000 }];
    expect(
      check(history({ attempts: [slow, probe, attempt({ start: 6_100, end: 6_110, replayed: true })], faults }))
        .violations,
    ).toEqual([]);
  });

  it('an unexpected 500 is a violation', () => {
    const attempts = [
      attempt({ outcome: 500, problem: 'internal-error', body: '{}' }),
      attempt({ start: 1_100, end: 1_110 }),
    ];
    expect(check(history({ attempts })).violations).toEqual(['op 0 (acct_a k0): 500 internal-error: {}']);
  });

  it('each violation is reported in full: its invariant, and the history of its operation (attempts, ledger, record, faults, logs)', () => {
    const attempts = [
      attempt({ outcome: 'network', faults: ['drop-after-commit'] }),
      attempt({ start: 1_100, end: 1_110, replayed: true }),
    ];
    const faults = [
      { kind: 'kill', slots: [1], start: 1_050, end: 1_400, inFlight: 1 },
      { kind: 'pause', slots: [2], start: 9_000, end: 9_500 },
    ];
    const logsFor = (key: string) => (key === 'k0' ? ['{"event":"executed","keyHash":"abc"}'] : []);
    const { details } = check(history({ attempts, faults, ledger: [row, { ...row, id: 'ch_2' }], logsFor }));
    expect(details.map((d) => [d.invariant, d.op])).toEqual([['one-charge', 0]]);
    expect(formatViolation(details[0] as (typeof details)[number]).split('\n')).toEqual([
      '✗ [one-charge] op 0 (acct_a k0): 2 charges in the ledger (expected exactly 1): ch_1, ch_2',
      '    op 0: acct_a key k0 amount 10000',
      '    attempt client slot 1 +     0 ms … +    10 ms [drop-after-commit] → network  {"id":"ch_1","object":"charge","amount":10000}',
      '    attempt client slot 1 +   100 ms … +   110 ms → 201 replayed  {"id":"ch_1","object":"charge","amount":10000}',
      '    ledger: ch_1 succeeded, ch_2 succeeded',
      '    record: {"key":"k0","status":"succeeded","resultId":"ch_1","responseStatus":201,"retryable":null,"leaseExpiresAt":4000}',
      '    fault kill  slots 1 +    50 ms … +   400 ms (1 in flight)',
      '    clock skews 0 / 0 / 0 ms (by slot)',
      '    log: {"event":"executed","keyHash":"abc"}',
    ]);
  });

  it('slow work that lost the claim to a racer sent after it is not a lost lease; with no other attempt under way it is', () => {
    const slow = attempt({ faults: ['slow'], slot: 0, start: 1_000, end: 1_200, outcome: 201, replayed: true });
    const racer = attempt({ role: 'racer', slot: 2, start: 1_020, end: 1_050 });
    const raced = check(history({ attempts: [slow, racer] }));
    expect([
      raced.violations,
      raced.figures['slow work that lost the claim to a racer / stalled by a freeze elsewhere'],
    ]).toEqual([[], '1 / 0']);
    expect(check(history({ attempts: [slow] })).violations).toEqual([
      'op 0: undisturbed slow work was answered 201  replayed with no other attempt under way',
    ]);
  });

  it('a freeze during which no other process answered (SQLite: frozen holding the write lock) excuses slow work anywhere', () => {
    const slow = leaseLost({ slot: 0, end: 9_000 });
    const held = attempt({ op: 0, role: 'replay', slot: 2, start: 3_000, end: 8_100, replayed: true }); // answered only after the freeze
    const after = attempt({ start: 9_100, end: 9_110, replayed: true, slot: 2 });
    const pause = { kind: 'pause', slots: [1], start: 2_500, end: 8_000 };
    const stalled = check(history({ attempts: [slow, held, after], faults: [pause] }));
    expect([stalled.violations, stalled.figures['freezes that stalled every process (SQLite write lock)']]).toEqual([
      [],
      1,
    ]);
    // The same freeze while another process kept answering: the slow work was undisturbed, and lost its lease.
    const answering = attempt({ role: 'replay', slot: 2, start: 4_000, end: 4_010, replayed: true });
    expect(check(history({ attempts: [slow, held, answering, after], faults: [pause] })).violations).toEqual([
      'op 0: undisturbed slow work lost its lease (answered 409 idempotency-lease-lost)',
    ]);
  });
});
