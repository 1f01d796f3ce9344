/**
 * The lab page's truth oracle (issue 28): after an action, every claim the page makes — the narration's claims
 * (charged / not charged / replayed / refused / in progress), each payment's Intended and Charged, the flag line and
 * the totals — is compared with the ledger and the records the API returns for the page's own sandbox account.
 */
import type { Page } from 'playwright-core';

/** The guided runs' buttons, in the order the page shows them: the problem first. */
export const GUIDED = [
  'Show me a double charge without keys',
  'Show me a replay after a dropped connection',
  'Show me a 409 while the first attempt runs',
  'Show me a failed attempt retried',
  'Show me a mismatch: same key, other amount',
  'Show me a declined card retried',
  'Show me a crash during a charge',
] as const;

/** Waits until every control's requests have finished, the figures were read back and the narration is final. */
export const settled = (page: Page) =>
  page.waitForSelector('body[data-pending="0"]', { state: 'attached', timeout: 60_000 });
export const narration = async (page: Page) => ((await page.getByTestId('narration').textContent()) ?? '').trim();
export const callout = async (page: Page) => ({
  flag: await page.getByTestId('charge-callout').getAttribute('data-flag'),
  text: ((await page.getByTestId('charge-callout').textContent()) ?? '').trim(),
});
/** The payments table: payment, intended, charged, verdict (as shown). */
export const paymentRows = (page: Page) =>
  page
    .getByTestId('payments')
    .locator('tbody tr')
    .evaluateAll((trs) =>
      trs.map((tr) => [
        tr.getAttribute('data-payment'),
        tr.querySelector('.c-intended')?.textContent ?? null,
        tr.querySelector('.c-charged')?.textContent ?? null,
        tr.getAttribute('data-verdict'),
      ]),
    );
/** The request log's outcomes, in order (`data-outcome` on each row). */
export const outcomes = (page: Page) =>
  page
    .locator('[data-testid="request-log"] tbody tr')
    .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-outcome')));

interface Charge {
  readonly id: string;
  readonly amount: number;
  readonly status: string;
}
interface PublicRecord {
  readonly key: string;
  readonly status: string;
  readonly resultId: string | null;
  readonly responseStatus: number | null;
}
export interface Account {
  readonly charges: readonly Charge[];
  readonly records: readonly PublicRecord[];
  readonly balance: { readonly charged: number; readonly count: number };
}

/** The page's sandbox account as the API reports it, read with the page's own key. */
export async function readAccount(page: Page, url: string): Promise<Account> {
  const key = String(await page.evaluate('sessionStorage.getItem("idem-lab-api-key")'));
  const get = async <T>(path: string) =>
    (await (await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${key}` } })).json()) as T;
  const [charges, records, balance] = await Promise.all([
    get<{ data: Charge[] }>('/v1/charges?limit=100'),
    get<{ data: PublicRecord[] }>('/v1/idempotency_records'),
    get<Account['balance']>('/v1/balance'),
  ]);
  return { charges: charges.data, records: records.data, balance };
}

interface Claim {
  readonly request: string;
  readonly kind: 'charged' | 'not-charged' | 'replayed' | 'refused' | 'in-progress' | 'unknown';
  readonly key: string | null;
  readonly charge: string | null;
}

const USD = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });
const dollars = (cents: number) => USD.format(cents / 100);
const short = (id: string) => (id.length <= 12 ? id : `${id.slice(0, 7)}…${id.slice(-4)}`);

/**
 * Collects every claim the narration makes from now on: a double click is two controls, told one after the other,
 * and the action's charges are checked against all that was said during it.
 *
 * @example
 * await listen(page); await page.mouse.click(x, y); await page.mouse.click(x, y)
 */
export async function listen(page: Page): Promise<void> {
  await page.evaluate(() => {
    const w = window as unknown as { told?: unknown[]; listener?: MutationObserver };
    w.told = [];
    if (w.listener) return;
    const el = document.querySelector<HTMLElement>('[data-testid="narration"]') as HTMLElement;
    w.listener = new MutationObserver(() => w.told?.push(...(JSON.parse(el.dataset.claims ?? '[]') as unknown[])));
    w.listener.observe(el, { attributes: true, attributeFilter: ['data-claims'] });
  });
}

/** What the page shows that the oracle checks: its claims and every figure, as data. */
async function shown(page: Page) {
  return page.evaluate(() => {
    const narration = document.querySelector<HTMLElement>('[data-testid="narration"]');
    const flag = document.querySelector<HTMLElement>('[data-testid="charge-callout"]');
    const fits = (el: HTMLElement | null) => el !== null && el.scrollHeight <= el.clientHeight + 1;
    return {
      text: narration?.textContent ?? '',
      claims: JSON.parse(narration?.dataset.claims ?? '[]') as unknown[],
      heard: (window as unknown as { told?: unknown[] }).told ?? null,
      flag: flag?.dataset.flag ?? null,
      flagText: flag?.textContent ?? '',
      fits: { narration: fits(narration), callout: fits(flag) },
      payments: [...document.querySelectorAll<HTMLElement>('[data-testid="payments"] tbody tr')].map((tr) => ({
        payment: tr.dataset.payment ?? '',
        verdict: tr.dataset.verdict ?? null,
        intended: Number(tr.dataset.intended ?? NaN),
        charged: Number(tr.dataset.charged),
        charges: (tr.dataset.charges ?? '').split(' ').filter(Boolean),
      })),
      total: document.querySelector('[data-testid="charged-total"]')?.textContent ?? '',
      rows: document.querySelector('[data-testid="rows-count"]')?.textContent ?? '',
    };
  });
}

/**
 * Every way the page's claims and figures disagree with the account as the API reads it now; `before` is the account
 * read before the action, so the charges it made are known. An empty list: the page said only what is true.
 *
 * @example
 * expect(await untrue(page, url, before)).toEqual([])
 */
export async function untrue(page: Page, url: string, before: Account): Promise<string[]> {
  const now = await readAccount(page, url);
  const view = await shown(page);
  const current = view.claims as Claim[];
  // Everything said during the action (listen), or, without a listener, what the narration says now.
  const claims = view.heard === null ? current : [...(view.heard as Claim[]), ...current];
  const problems: string[] = [];
  const ledger = new Map(now.charges.map((c) => [c.id, c]));
  const succeeded = now.charges.filter((c) => c.status === 'succeeded');
  const record = (key: string | null) => now.records.find((r) => r.key === key);
  // The narration: each claim against the ledger and the key's record.
  for (const [i, c] of claims.entries()) {
    const newest = !claims.slice(i + 1).some((later) => later.key !== null && later.key === c.key);
    if (c.kind === 'charged') {
      if (ledger.get(c.charge ?? '')?.status !== 'succeeded')
        problems.push(`claims charged ${c.charge}: not in the ledger`);
      if (c.charge && current.includes(c) && !view.text.includes(short(c.charge)))
        problems.push(`claims charged ${c.charge} without naming it`);
      const r = record(c.key);
      if (c.key !== null && r?.status === 'succeeded' && r.resultId !== c.charge)
        problems.push(`claims ${c.charge} for key ${c.key}, whose record holds ${r.resultId}`);
    }
    if (c.kind === 'replayed' && !['succeeded', 'failed'].includes(record(c.key)?.status ?? ''))
      problems.push(`claims a replay on key ${c.key}, whose record is ${record(c.key)?.status}`);
    if (c.kind === 'in-progress' && newest && record(c.key)?.status !== 'in_progress')
      problems.push(`claims key ${c.key} in progress; its record is ${record(c.key)?.status}`);
  }
  // The action's new charges are exactly the ones claimed charged (and not already there before it).
  const old = new Set(before.charges.filter((c) => c.status === 'succeeded').map((c) => c.id));
  const made = succeeded.filter((c) => !old.has(c.id)).map((c) => c.id);
  const claimed = [...new Set(claims.flatMap((c) => (c.kind === 'charged' && c.charge ? [c.charge] : [])))];
  const fresh = claimed.filter((id) => !old.has(id));
  if (JSON.stringify([...made].sort()) !== JSON.stringify([...fresh].sort()))
    problems.push(`the action charged [${made.join(', ')}] but the page claims [${fresh.join(', ')}]`);
  // Each payment's Charged is its ledger rows; every succeeded row belongs to exactly one payment.
  const counted = view.payments.flatMap((p) => p.charges);
  for (const c of succeeded)
    if (counted.filter((id) => id === c.id).length !== 1)
      problems.push(`ledger row ${c.id} is in ${counted.filter((id) => id === c.id).length} payments`);
  for (const p of view.payments) {
    const sum = p.charges.reduce(
      (total, id) => total + (ledger.get(id)?.status === 'succeeded' ? (ledger.get(id)?.amount ?? 0) : NaN),
      0,
    );
    if (sum !== p.charged)
      problems.push(`payment ${p.payment} shows ${p.charged} charged; its ledger rows sum to ${sum}`);
    if (p.payment !== 'stray' && (p.verdict === 'over') !== p.charged > p.intended)
      problems.push(`payment ${p.payment}: verdict ${p.verdict} for ${p.charged} charged of ${p.intended} meant`);
  }
  const over = view.payments.filter((p) => p.verdict === 'over');
  if ((view.flag === 'over') !== over.length > 0) problems.push(`flag line says ${view.flag} with ${over.length} over`);
  const named = /^Payments? ([\d, ]+) (?:was|were)/.exec(view.flagText)?.[1]?.split(', ') ?? [];
  if (view.flag === 'over' && named.join(' ') !== over.map((p) => p.payment).join(' '))
    problems.push(`flag line names payments [${named.join(', ')}], over: [${over.map((p) => p.payment).join(', ')}]`);
  if (view.total !== dollars(now.balance.charged))
    problems.push(`total ${view.total}, balance ${dollars(now.balance.charged)}`);
  if (view.rows !== String(now.records.length)) problems.push(`rows ${view.rows}, records ${now.records.length}`);
  if (!view.fits.narration) problems.push(`the narration overflows its box: ${view.text}`);
  if (!view.fits.callout) problems.push(`the flag line overflows its box: ${view.flagText}`);
  return problems;
}

/**
 * Runs `action`, waits for the page to settle, and returns what the page then says that is not so.
 *
 * @example
 * expect(await truthAfter(page, url, () => page.getByRole('button', { name: 'Charge $500' }).click())).toEqual([])
 */
export async function truthAfter(page: Page, url: string, action: () => Promise<unknown>): Promise<string[]> {
  const before = await readAccount(page, url);
  await listen(page);
  await action();
  await settled(page);
  return untrue(page, url, before);
}
