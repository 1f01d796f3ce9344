/**
 * @module The lab's request history (lab mode, sandbox accounts): for each charge a sandbox account sends, what the
 * server did with it — the key's record before and after, how the key was claimed, what the work did, the ledger row
 * it left, the answer sent or the connection cut — read back from the store and the ledger once the request is
 * done, and kept in the ledger's database (`lab_requests`). The lab page draws every sentence from these entries,
 * so a reload, another tab or a fresh page shows exactly what happened (`GET /v1/lab/history`).
 *
 * The history is whole, or the request does not run: an account keeps at most `LAB_HISTORY_LIMIT` requests (the
 * next is refused 409 before it runs, and Reset starts a fresh account), and a request whose entry cannot be
 * written is refused 503 before it runs. So every ledger row of a sandbox account belongs to an entry the page
 * reads. A request that a previous server process left `running` (the server stopped under it) is marked
 * `interrupted` when the next process starts, before it serves anything: its record and its ledger row as they are
 * then, which only the stopped request could have changed. The lab runs one demo process per database.
 */
import { randomUUID } from 'node:crypto';
import { recordPk, type IdempotencyRecord, type IdempotencyStore, type WriteResult } from 'idem';
import { problem as problemResponse } from 'idem/http';
import type { Charge, Ledger } from './ledger.js';
import { labTakeoverOf, type LabTakeover, type Reconciled } from './lab-takeover.js';

/** The most requests a sandbox account's history keeps; past it, the account's charges are refused (Reset). */
export const LAB_HISTORY_LIMIT = 500;
/** One line in the server's log (the entry itself is never printed). */
const unwritten = (error: unknown): void =>
  console.error(`demo: lab history not written: ${error instanceof Error ? error.message : String(error)}`);
/** This server process, written with each entry. */
const INSTANCE = randomUUID();
/** Set by the server on each journaled request (any client value is replaced): finds the request's trace. */
const TRACE = 'x-idem-lab-trace';
const IN_USE = 'urn:idem:problem:idempotency-key-in-use';
const REUSED = 'urn:idem:problem:idempotency-key-reused';

/** The faults a lab request asks for, from its `Idem-Lab-*` headers. */
export interface LabFaults {
  /** `Idem-Lab-Fault: drop-after-commit`: the work commits, then the connection is cut before the answer. */
  readonly drop: boolean;
  /** `Idem-Lab-Fault: crash`: the attempt dies after the processor call: no completion, no renewal, no answer. */
  readonly crash: boolean;
  /** `Idem-Lab-Fail: 503`: the processor fails. */
  readonly fail: boolean;
  /** `Idem-Lab-Delay-Ms`: how long the processor takes. */
  readonly delayMs: number;
}

/**
 * The faults `headers` ask for (the caller checks lab mode).
 *
 * @example
 * labFaults(request.headers).crash
 */
export function labFaults(headers: Headers): LabFaults {
  const fault = headers.get('idem-lab-fault');
  const delay = Number(headers.get('idem-lab-delay-ms') ?? 0);
  return {
    drop: fault === 'drop-after-commit',
    crash: fault === 'crash',
    fail: headers.get('idem-lab-fail') === '503',
    delayMs: Number.isFinite(delay) && delay > 0 ? Math.floor(delay) : 0,
  };
}

/** What the charge's work did. `crashed`: it called the processor, then its attempt died before completing. */
export type LabWork = 'charged' | 'declined' | 'processor-failed' | 'crashed';

/**
 * How the request met the key: no key; a fresh claim; a reclaim of a retryable failure; a takeover of a lapsed lease;
 * a takeover the `reconcile` hook answered from the ledger (nothing ran); or refused.
 */
export type LabClaim =
  'none' | 'fresh' | 'reclaimed' | 'taken-over' | 'reconciled' | 'replayed' | 'in-flight' | 'mismatch' | 'refused';

/** A record as the history shows it (never the response body). */
export interface LabRecord {
  readonly id: string;
  readonly status: IdempotencyRecord['status'];
  readonly retryable: boolean | null;
  readonly responseStatus: number | null;
  readonly resultId: string | null;
  readonly leaseExpiresAt: number;
}

/** One request, as the server saw it and read back after it. */
export interface LabEntry {
  readonly seq: number;
  /** The page's id for the request (`Idem-Lab-Request`), or `seq` as text. */
  readonly request: string;
  /** Epoch ms when the server received it. */
  readonly at: number;
  /** Ms until the server answered or cut the connection; null while it runs. */
  readonly ms: number | null;
  /** `interrupted`: the server process stopped while it ran; `record` and `charge` were read back afterwards. */
  readonly state: 'running' | 'done' | 'interrupted';
  /** The server process that ran it. */
  readonly instance: string;
  /** The ledger ref a keyless charge of this request carries (a keyed one carries its record's id). */
  readonly ref: string;
  /** What the person did (`Idem-Lab-Control`): Charge, Retry, Race, a guided run's step… */
  readonly control: string;
  /** The payment the person meant (`Idem-Lab-Payment`): a charge and its retries share it. */
  readonly payment: string | null;
  /** Requests sent together by one Race share it (`Idem-Lab-Group`). */
  readonly group: string | null;
  readonly key: string | null;
  readonly amount: number;
  readonly source: string;
  readonly faults: LabFaults;
  /** The takeover policy it ran under and whether the processor took the record id as its key (lab-takeover.ts). */
  readonly takeover?: LabTakeover;
  /** On a takeover under `'reconcile'`: what the hook found in the ledger (`not_done`: nothing, so the work ran). */
  readonly reconciled?: Reconciled['state'] | null;
  /** What the client was sent; null while running and when the connection was cut. */
  readonly answer: {
    readonly status: number;
    readonly replayed: boolean;
    readonly problem: string | null;
    readonly retryAfter: string | null;
  } | null;
  /** The status the server produced, sent or not (a cut connection still had one). */
  readonly status: number | null;
  readonly claim: LabClaim | null;
  /** The key's record just before the request, and once it was done (read from the store). */
  readonly before: LabRecord | null;
  readonly record: LabRecord | null;
  /** The record id the work ran under: the processor's own key for the charge. Null when no work ran under a key. */
  readonly recordId: string | null;
  readonly work: LabWork | null;
  /**
   * The ledger row the work wrote or was given back, read from the ledger after the request; null: none there.
   * `found`: the row was already there (another attempt under the same record id had made it), so this one made none.
   */
  readonly charge: (Pick<Charge, 'id' | 'amount' | 'status'> & { readonly found: boolean }) | null;
  /** Whether the server cut the connection (the fault asked for it, and the work ran): no answer was sent. */
  readonly cut?: boolean;
}

/** What the charge handler tells the journal about the work (`note`). */
export interface LabTrace {
  recordId?: string | null;
  reclaimed?: boolean;
  work?: LabWork;
  chargeId?: string;
  /** The charge was already in the ledger under the record id: the work was handed it and made none. */
  found?: boolean;
  /** The `reconcile` hook's answer on this request's takeover. */
  reconciled?: Reconciled['state'];
}

export interface LabJournal {
  /** Runs `run` on one sandbox charge, journaling it before and after. `params` are its parsed body. */
  charge(
    account: string,
    request: Request,
    params: { readonly amount: number; readonly source: string },
    run: (request: Request) => Promise<Response>,
  ): Promise<Response>;
  /** Called by the charge handler: what the work did. A request that is not journaled is ignored. */
  note(request: Request, trace: LabTrace): void;
  /** The ledger ref for a keyless charge of this request, or null when it is not journaled. */
  refOf(request: Request): string | null;
  /** Whether the fault headers may cut this answer's connection: only when the request's work ran. */
  cuts(response: Response): boolean;
  /** Once this process holds its port: marks what a stopped process left running as interrupted. Returns how many. */
  recover(): Promise<number>;
  /**
   * Runs `clear` (deleting the account's history and charges) unless one of its requests is running — then a 409
   * `lab-busy` problem. Its charges are refused while `clear` runs. Returns `clear`'s count, or the problem.
   */
  reset(account: string, clear: () => Promise<number>): Promise<number | Response>;
  /** The account's whole history (oldest first) and its charges, newest first. */
  history(account: string): Promise<{ entries: LabEntry[]; charges: Charge[] }>;
}

/** A header value the history keeps: printable, at most 80 characters. */
const label = (value: string | null): string | null =>
  value === null ? null : value.replace(/[^\x20-\x7e]/g, '').slice(0, 80) || null;

const shown = (record: IdempotencyRecord | null): LabRecord | null =>
  record && {
    id: record.id,
    status: record.status,
    retryable: record.status === 'failed' ? record.retryable : null,
    responseStatus: record.response?.status ?? null,
    resultId: record.resultId,
    leaseExpiresAt: record.leaseExpiresAt,
  };

async function problemType(response: Response): Promise<string | null> {
  if (!(response.headers.get('content-type') ?? '').includes('json')) return null;
  try {
    const body = (await response.clone().json()) as { type?: unknown };
    return typeof body.type === 'string' ? body.type : null;
  } catch {
    return null;
  }
}

function claimOf(
  key: string | null,
  trace: LabTrace,
  before: LabRecord | null,
  response: Response,
  problem: string | null,
): LabClaim {
  if (key === null) return 'none';
  if (trace.reconciled === 'succeeded' || trace.reconciled === 'failed') return 'reconciled';
  if (trace.recordId) return !trace.reclaimed ? 'fresh' : before?.status === 'in_progress' ? 'taken-over' : 'reclaimed';
  if (response.headers.get('idempotent-replayed') === 'true') return 'replayed';
  if (problem === IN_USE) return 'in-flight';
  if (problem === REUSED) return 'mismatch';
  return 'refused';
}

/**
 * The lab's journal over the store (for the records) and the ledger (for the charges and the history table).
 *
 * @example
 * const journal = labJournal(store, ledger)
 * return journal.charge(account, request, params, createCharge)
 */
export function labJournal(store: Pick<IdempotencyStore<unknown>, 'get'>, ledger: Ledger): LabJournal {
  const traces = new Map<string, LabTrace>();
  /** A read that fails (the store is down) shows as nothing read: the entry never guesses. */
  const read = async (pk: string | null): Promise<LabRecord | null> => {
    if (pk === null) return null;
    try {
      return shown(await store.get(pk));
    } catch {
      return null;
    }
  };
  /** Writes `entry` over row `seq`. A failure is logged: the entry then shows as interrupted after a restart. */
  const update = async (account: string, seq: number, entry: LabEntry): Promise<void> => {
    try {
      await ledger.journal(account, seq, JSON.stringify(entry), LAB_HISTORY_LIMIT);
    } catch (error) {
      unwritten(error);
    }
  };
  /**
   * What a request a stopped process left running did, read before anything else runs: its key's record, and the
   * ledger row under that record's id (or the keyless request's own ref). A keyed row another entry says it made
   * was not made by this one.
   */
  const interrupted = async (account: string, entry: LabEntry): Promise<LabEntry> => {
    const record = await read(entry.key === null ? null : recordPk(account, entry.key));
    const ref = entry.key === null ? (entry.ref ?? null) : (record?.id ?? null);
    const charge = ref === null ? undefined : await ledger.byRef(account, ref);
    let found = false;
    if (charge && entry.key !== null) {
      const others = (await ledger.history(account, LAB_HISTORY_LIMIT)).filter((row) => row.seq !== entry.seq);
      found = others.some((row) => {
        const other = JSON.parse(row.entry) as LabEntry;
        return other.charge?.id === charge.id && !other.charge.found;
      });
    }
    return {
      ...entry,
      state: 'interrupted',
      record,
      charge: charge ? { id: charge.id, amount: charge.amount, status: charge.status, found } : null,
    };
  };
  const cutting = new WeakSet<Response>();
  /** Requests running now, per account: Reset is refused while any runs (their last write would find no row). */
  const busy = new Map<string, number>();
  /** Accounts being Reset: their charges are refused meanwhile. */
  const resetting = new Set<string>();
  const busyProblem = (why: string): Response =>
    problemResponse({ status: 409, slug: 'lab-busy', title: 'Lab account busy', detail: `${why}.` });
  const parts: JournalParts = { ledger, read, update, traces, cutting };

  return {
    charge(account, request, params, run) {
      // Counted from the first line, before anything awaits: a Reset sees it at once, and one running waits.
      if (resetting.has(account)) return Promise.resolve(busyProblem('a Reset of this account is running'));
      busy.set(account, (busy.get(account) ?? 0) + 1);
      return journaled(parts, account, request, params, run).finally(() => {
        const left = (busy.get(account) ?? 1) - 1;
        if (left === 0) busy.delete(account);
        else busy.set(account, left);
      });
    },
    async reset(account, clear) {
      const running = busy.get(account) ?? 0;
      if (running > 0)
        return busyProblem(
          `${running} of this account's requests ${running === 1 ? 'is' : 'are'} still running: Reset once they are done`,
        );
      resetting.add(account);
      try {
        return await clear();
      } finally {
        resetting.delete(account);
      }
    },
    note(request, trace) {
      const id = request.headers.get(TRACE);
      const known = id === null ? undefined : traces.get(id);
      if (id !== null && known) traces.set(id, { ...known, ...trace });
    },
    refOf(request) {
      const id = request.headers.get(TRACE);
      return id !== null && traces.has(id) ? `lab_${id}` : null;
    },
    cuts: (response) => cutting.has(response),
    async recover() {
      let marked = 0;
      for (const row of await ledger.unfinished()) {
        const entry: LabEntry = { ...(JSON.parse(row.entry) as LabEntry), seq: row.seq };
        if (entry.state !== 'running' || entry.instance === INSTANCE) continue;
        // Written strictly: a failure (a locked database) fails the pass, and the caller tries again.
        const read = await interrupted(row.account, entry);
        await ledger.journal(row.account, row.seq, JSON.stringify(read), LAB_HISTORY_LIMIT);
        marked++;
      }
      return marked;
    },
    async history(account) {
      const rows = await ledger.history(account, LAB_HISTORY_LIMIT);
      const entries = rows.map((row): LabEntry => ({ ...(JSON.parse(row.entry) as LabEntry), seq: row.seq }));
      // Read after the entries: every charge an entry names is among them. At most one per entry.
      return { entries, charges: await ledger.list(account, LAB_HISTORY_LIMIT) };
    },
  };
}

/** What `labJournal` keeps for each charge it journals (see there). */
interface JournalParts {
  readonly ledger: Ledger;
  readonly read: (pk: string | null) => Promise<LabRecord | null>;
  readonly update: (account: string, seq: number, entry: LabEntry) => Promise<void>;
  readonly traces: Map<string, LabTrace>;
  readonly cutting: WeakSet<Response>;
}

/** One sandbox charge: its entry written before it runs, `run` on it, then its entry as done. */
async function journaled(
  parts: JournalParts,
  ...[account, request, params, run]: Parameters<LabJournal['charge']>
): Promise<Response> {
  const { ledger, read, update, traces, cutting } = parts;
  const traceId = crypto.randomUUID();
  const headers = new Headers(request.headers);
  headers.set(TRACE, traceId);
  const key = headers.get('idempotency-key');
  const pk = key === null ? null : recordPk(account, key);
  const faults = labFaults(headers);
  const at = Date.now();
  let entry = runningEntry(headers, traceId, key, params, faults, at, await read(pk));
  let seq: number | null;
  try {
    seq = await ledger.journal(account, null, JSON.stringify(entry), LAB_HISTORY_LIMIT);
  } catch (error) {
    unwritten(error);
    return problemResponse({
      status: 503,
      slug: 'lab-history-unavailable',
      title: 'Lab history unavailable',
      detail: 'The lab could not record this request, so it did not run it: nothing was charged.',
    });
  }
  if (seq === null) {
    return problemResponse({
      status: 409,
      slug: 'lab-history-full',
      title: 'Lab history full',
      detail: `This sandbox account has sent ${LAB_HISTORY_LIMIT} requests, the most the lab keeps, so it did not run this one: nothing was charged. Reset starts a fresh account.`,
    });
  }
  entry = { ...entry, seq, request: entry.request || String(seq) };
  traces.set(traceId, {});
  {
    let response: Response;
    let trace: LabTrace;
    try {
      response = await run(new Request(request.url, { method: 'POST', headers, body: await request.arrayBuffer() }));
    } finally {
      trace = traces.get(traceId) ?? {};
      traces.delete(traceId);
    }
    const problem = await problemType(response);
    let charge: Charge | undefined;
    try {
      charge = trace.chargeId === undefined ? undefined : await ledger.get(account, trace.chargeId);
    } catch {
      charge = undefined;
    }
    // A fault cuts the connection after the work; a request that ran none (a replay, a 409) is answered.
    const cut = (faults.drop || faults.crash) && trace.work !== undefined;
    if (cut) cutting.add(response);
    const done: LabEntry = {
      ...entry,
      ms: Date.now() - at,
      state: 'done',
      status: response.status,
      answer: cut
        ? null
        : {
            status: response.status,
            replayed: response.headers.get('idempotent-replayed') === 'true',
            problem,
            retryAfter: response.headers.get('retry-after'),
          },
      claim: claimOf(key, trace, entry.before, response, problem),
      record: await read(pk),
      recordId: trace.recordId ?? null,
      work: trace.work ?? null,
      reconciled: trace.reconciled ?? null,
      charge: charge
        ? { id: charge.id, amount: charge.amount, status: charge.status, found: trace.found === true }
        : null,
      cut,
    };
    await update(account, seq, done);
    return response;
  }
}

/** A charge's entry as written before it runs: its request, key and faults, and the key's record before it. */
function runningEntry(
  headers: Headers,
  traceId: string,
  key: string | null,
  params: { readonly amount: number; readonly source: string },
  faults: LabFaults,
  at: number,
  before: LabRecord | null,
): LabEntry {
  return {
    seq: 0,
    request: label(headers.get('idem-lab-request')) ?? '',
    at,
    ms: null,
    state: 'running',
    instance: INSTANCE,
    ref: `lab_${traceId}`,
    control: label(headers.get('idem-lab-control')) ?? 'API',
    payment: label(headers.get('idem-lab-payment')),
    group: label(headers.get('idem-lab-group')),
    key,
    amount: params.amount,
    source: params.source,
    faults,
    takeover: labTakeoverOf(headers),
    reconciled: null,
    answer: null,
    status: null,
    claim: null,
    before,
    record: null,
    recordId: null,
    work: null,
    charge: null,
  };
}

/**
 * The store as a crashed attempt leaves it: its claim lands, and nothing after it does — no renewal, no completion
 * (so no declared effects), no release. Each of those answers as if written, so the attempt runs to its end; the
 * record stays `in_progress` until its lease lapses, then the next attempt takes it over with the same id.
 *
 * @example
 * const crashing = idempotency({ ...options, store: crashedStore(store) })(handler)
 */
export function crashedStore<Tx>(store: IdempotencyStore<Tx>): IdempotencyStore<Tx> {
  const written = async (): Promise<WriteResult> => ({ ok: true });
  return {
    name: store.name,
    get roundTrips() {
      return store.roundTrips;
    },
    ...(store.maxResponseBytes === undefined ? {} : { maxResponseBytes: store.maxResponseBytes }),
    claim: (request) => store.claim(request),
    get: (pk) => store.get(pk),
    list: (request) => store.list(request),
    sweep: (request) => store.sweep(request),
    complete: written,
    renew: written,
    release: written,
    close: async () => {},
  };
}
