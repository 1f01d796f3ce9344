/**
 * @module The model page's two sections where time moves the row: a crash mid-charge (the lease lapses, a retry
 * takes over with the same id) and expiry (the TTL passes; the store may or may not still hold the row). Every
 * sentence comes from a store answer; the countdowns run against the row's own times, on the server's clock.
 */
import { getJson, postJson, uuid } from './api.js';
import { h } from './dom.js';
import { abbreviate, clock } from './format.js';
import { running, showError, type Report } from './model-show.js';
import type { ClaimValue, ModelRecord, Operation } from './model-types.js';

/** The lapse demonstration's lease. */
const LAPSE_LEASE_MS = 3_000;

interface Clock {
  readonly element: HTMLElement;
  /** Shows `text` with `state` until `stop` or the next `run`. */
  show(text: string, state: string): void;
  /** Re-runs `render(nowOnTheServer)` every 100 ms. */
  run(render: (serverNow: number) => void): void;
  stop(): void;
}

/** A countdown beside a button. `offset` is the server's clock minus the browser's, from the last answer. */
function countdown(element: HTMLElement): Clock & { offset: number } {
  let timer: number | undefined;
  const self = {
    element,
    offset: 0,
    show(text: string, state: string) {
      element.textContent = text;
      element.dataset.state = state;
    },
    run(render: (serverNow: number) => void) {
      window.clearInterval(timer);
      const tick = () => render(Date.now() + self.offset);
      timer = window.setInterval(tick, 100);
      tick();
    },
    stop() {
      window.clearInterval(timer);
    },
  };
  return self;
}

const seconds = (ms: number) => `${(Math.abs(ms) / 1000).toFixed(1)} s`;
const claimed = (op: Operation) => (op.result as ClaimValue | null)?.kind === 'claimed';
const recordOf = (op: Operation) => (op.result as ClaimValue | null)?.record ?? null;

export interface TimedElements {
  readonly first: HTMLButtonElement;
  readonly second: HTMLButtonElement;
  readonly third: HTMLButtonElement;
  readonly clock: HTMLElement;
  readonly output: HTMLElement;
}

/** Runs `work` with `button` disabled meanwhile; what it throws is shown in `output`. */
function attempt(button: HTMLButtonElement, output: HTMLElement, work: () => Promise<void>): void {
  void running(button, async () => {
    try {
      await work();
    } catch (error) {
      showError(output, error);
    }
  });
}

/**
 * "A crash mid-charge": attempt A claims with a 3 s lease and never renews; attempt B's retry is refused while the
 * lease holds and takes the key over (same id) once it has lapsed; A's late completion is then refused.
 *
 * @example
 * lapseSection({ first: claimA, second: retryB, third: lateA, clock, output }, report)
 */
export function lapseSection(ui: TimedElements, report: Report): void {
  const time = countdown(ui.clock);
  let held: { key: string; token: string; leaseExpiresAt: number } | null = null;
  /** The story so far: each earlier step's title and what the store answered, above the latest step in full. */
  let story: Array<{ title: string; text: string }> = [];
  /** Attempt A's claim, in words, kept above the story. */
  let intro: Node | null = null;
  const tell = (op: Operation, title: string) => {
    const earlier = story.map(({ title: t, text }) => h('li', {}, h('strong', {}, `${t}: `), text));
    report(
      ui.output,
      [{ op, title }],
      h(
        'div',
        {},
        intro,
        story.length ? h('ol', { class: 'story small', 'data-testid': 'lapse-story' }, ...earlier) : null,
      ),
    );
    story.push({ title, text: op.reading?.text ?? '' });
  };

  ui.first.addEventListener('click', () => {
    attempt(ui.first, ui.output, async () => {
      const key = `crash-${uuid().slice(0, 8)}`;
      const op = await postJson<Operation>('/v1/model/claim', { key, leaseMs: LAPSE_LEASE_MS });
      time.offset = op.now - Date.now();
      const record = recordOf(op);
      held = claimed(op) && record ? { key, token: record.token, leaseExpiresAt: record.leaseExpiresAt } : null;
      const note = held
        ? `Attempt A holds ${key} (id ${abbreviate(record?.id ?? '', 8, 4)}) with a 3 s lease, and crashes now: nothing will renew it.`
        : 'Attempt A did not get the key.';
      story = [];
      intro = h('p', { class: 'callout', 'data-testid': 'lapse-note' }, note);
      tell(op, 'Attempt A: claim with a 3 s lease');
      ui.second.disabled = held === null;
      ui.third.disabled = held === null;
      const lease = held;
      if (lease) {
        time.run((now) => {
          const left = lease.leaseExpiresAt - now;
          time.show(
            left > 0
              ? `lease holds: lapses in ${seconds(left)}, nothing renews it`
              : `lease lapsed ${seconds(left)} ago: a retry may take over`,
            left > 0 ? 'live' : 'lapsed',
          );
        });
      }
    });
  });

  ui.second.addEventListener('click', () => {
    const lease = held;
    if (!lease) return;
    attempt(ui.second, ui.output, async () => {
      const op = await postJson<Operation>('/v1/model/claim', { key: lease.key, leaseMs: LAPSE_LEASE_MS });
      tell(op, 'Attempt B: retry the claim');
      if (op.reading?.transition === 'takeover') {
        time.stop();
        time.show(`taken over by attempt B: same id, new token`, 'taken');
        ui.second.disabled = true;
      }
    });
  });

  ui.third.addEventListener('click', () => {
    const lease = held;
    if (!lease) return;
    attempt(ui.third, ui.output, async () => {
      const op = await postJson<Operation>('/v1/model/complete', {
        key: lease.key,
        token: lease.token,
        outcome: 'succeeded',
      });
      tell(op, "Attempt A: record its outcome with A's token");
    });
  });
}

/**
 * "Expiry": a row with a 10 s TTL; a claim is refused while it is live and succeeds once it has expired. After the
 * countdown the page reads the row, and says whether the store still holds it (SQL stores until a sweep) or not
 * (Redis, natively).
 *
 * @example
 * expirySection({ first: write, second: claim, third: read, clock, output }, report)
 */
export function expirySection(ui: TimedElements, report: Report): void {
  const time = countdown(ui.clock);
  /** The row as written, while it has not been claimed again; and its key, kept for "Read it". */
  let expiring: ModelRecord | null = null;
  let key: string | null = null;
  /** What the last read said: is the row still stored, and when was that read. */
  let stored: { held: boolean; at: number } | null = null;
  let checking = false;

  const render = (now: number) => {
    if (!expiring) return;
    const left = expiring.expiresAt - now;
    if (left > 0) return time.show(`live: expires in ${seconds(left)}`, 'live');
    if (stored === null) {
      // Past expiresAt: ask the store whether it still holds the row (once), rather than guess.
      if (!checking && -left >= 250) void check(expiring.key);
      return time.show(`expired ${seconds(left)} ago: reading the store…`, 'expired');
    }
    const where = stored.held ? 'the store still holds it' : 'the store no longer holds it';
    time.show(`expired ${seconds(left)} ago; ${where} (read at ${clock(stored.at)})`, 'expired');
  };

  /** Reads the row; returns the answer after noting whether the store holds it. */
  const check = async (rowKey: string): Promise<Operation> => {
    checking = true;
    try {
      const op = await getJson<Operation>(`/v1/model/read?key=${encodeURIComponent(rowKey)}`);
      if (typeof op.stored === 'boolean') stored = { held: op.stored, at: op.now };
      return op;
    } finally {
      checking = false;
    }
  };

  ui.first.addEventListener('click', () => {
    attempt(ui.first, ui.output, async () => {
      const made = await postJson<{
        key: string;
        ttlMs: number;
        record: ModelRecord | null;
        steps: Operation[];
        now: number;
      }>('/v1/model/expiring');
      time.offset = made.now - Date.now();
      expiring = made.record;
      key = made.key;
      stored = null;
      ui.second.disabled = expiring === null;
      ui.third.disabled = false;
      const ttl = `${made.ttlMs / 1000} s`;
      report(
        ui.output,
        made.steps.map((op, i) => ({
          op,
          title: i === 0 ? `Claim with a ${ttl} TTL` : 'Record the outcome: succeeded',
        })),
        h(
          'p',
          { class: 'callout', 'data-testid': 'expiry-note' },
          `Wrote ${made.key} with a ${ttl} TTL. Claim its key now: the live row refuses it. Claim again after the countdown: the claim treats the expired row as absent.`,
        ),
      );
      time.run(render);
    });
  });

  ui.second.addEventListener('click', () => {
    const before = expiring;
    if (!before) return;
    attempt(ui.second, ui.output, async () => {
      const op = await postJson<Operation>('/v1/model/claim', { key: before.key });
      const record = recordOf(op);
      const ids = record ? `a new record id (${abbreviate(record.id, 8, 4)}, was ${abbreviate(before.id, 8, 4)})` : '';
      const transition = op.reading?.transition;
      const note =
        transition === 'reclaim-expired'
          ? `The expired row, still stored, counted as absent: claimed afresh with ${ids}.`
          : transition === 'fresh-claim'
            ? `The store no longer held the row (deleted at its TTL): a fresh claim, with ${ids}.`
            : claimed(op)
              ? `Claimed (${transition ?? 'as the store answered'}).`
              : 'Refused: the row is still live, so its key is still taken.';
      report(
        ui.output,
        [{ op, title: 'Claim its key' }],
        h('p', { class: 'callout', 'data-testid': 'expiry-note' }, note),
      );
      if (claimed(op)) {
        time.stop();
        time.show('claimed again: a new lease and TTL from now', 'reclaimed');
        expiring = null;
        ui.second.disabled = true;
      }
    });
  });

  ui.third.addEventListener('click', () => {
    // Always this section's own row, also after it was claimed again (never the key in the read pattern's field).
    const rowKey = key;
    if (rowKey === null) return;
    const wrote = expiring;
    attempt(ui.third, ui.output, async () => {
      const op = await check(rowKey);
      // The row this section wrote, read back as absent after its TTL: the store has deleted it (Redis does so
      // natively); the drawing shows that deletion rather than a bare "absent".
      const gone = wrote !== null && op.stored === false && op.reading;
      report(ui.output, [
        { op: gone ? { ...op, reading: { ...gone, transition: 'delete', from: 'expired' } } : op, title: 'Read it' },
      ]);
      if (expiring) render(Date.now() + time.offset);
    });
  });
}
