/**
 * @module A key keeps the takeover policy of its first attempt (lab mode, sandbox accounts). In a real API a route's
 * takeover policy does not change between the attempts of one key, so the lab refuses a charge whose
 * `Idem-Lab-Takeover` differs from the one the key's record was first claimed under: 400 `parameter-invalid`, before
 * the journal and the idempotency layer (nothing is run, recorded or journaled). The first policy is read from the
 * lab history (lab-journal.ts), kept in the ledger's database: it holds across a server restart as the history does.
 */
import { IdempotencyError, recordPk, type IdempotencyStore, type TakeoverPolicy } from 'idem';
import { problem, problemFor } from 'idem/http';
import { LAB_HISTORY_LIMIT, type LabEntry } from './lab-journal.js';
import type { Ledger } from './ledger.js';

/**
 * The takeover policy the key's current record was first claimed under, or undefined when the key has no record (a
 * first attempt picks its policy) or the history holds no attempt for it. The attempt that claimed the record is the
 * first entry naming its id; while that attempt runs (or after a stop interrupted it) its entry names no record yet,
 * and the key's first unfinished entry stands for it. An entry without switches ran under the default, `'rerun'`.
 *
 * @example
 * const first = await firstTakeover(store, ledger, 'acct_lab_abcdefgh', 'order-1')
 */
export async function firstTakeover(
  store: Pick<IdempotencyStore<unknown>, 'get'>,
  ledger: Pick<Ledger, 'history'>,
  account: string,
  key: string,
): Promise<TakeoverPolicy | undefined> {
  const record = await store.get(recordPk(account, key));
  if (!record) return undefined;
  const entries = (await ledger.history(account, LAB_HISTORY_LIMIT))
    .map((row) => JSON.parse(row.entry) as LabEntry)
    .filter((entry) => entry.key === key);
  const first =
    entries.find((entry) => entry.recordId === record.id) ?? entries.find((entry) => entry.state !== 'done');
  return first === undefined ? undefined : (first.takeover?.takeover ?? 'rerun');
}

/**
 * The 400 problem+json for a charge of `key` sent under `asked` when the key was first sent under another policy (a
 * 503 when the record or the history cannot be read), or undefined when the charge may run.
 *
 * @example
 * const pinned = await pinnedTakeover(store, ledger, account, key, 'rerun')
 * if (pinned) return pinned
 */
export async function pinnedTakeover(
  store: Pick<IdempotencyStore<unknown>, 'get'>,
  ledger: Pick<Ledger, 'history'>,
  account: string,
  key: string,
  asked: TakeoverPolicy,
): Promise<Response | undefined> {
  // A store or ledger that cannot be read is the 503 the idempotency layer would give: nothing runs unchecked.
  const first = await firstTakeover(store, ledger, account, key).catch(() => null);
  if (first === null) return problemFor(new IdempotencyError('STORE_UNAVAILABLE', 'The lab could not read the key.'));
  if (first === undefined || first === asked) return undefined;
  return problem({
    status: 400,
    slug: 'parameter-invalid',
    title: 'Invalid parameter',
    detail: `This Idempotency-Key was first sent with \`Idem-Lab-Takeover: ${first}\`; a key keeps the takeover policy of its first attempt, so this request (\`${asked}\`) was not run: nothing changed.`,
    extensions: { param: 'Idem-Lab-Takeover', first },
  });
}
