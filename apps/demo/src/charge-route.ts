/**
 * @module `POST /v1/charges` (app.ts): the charge's work, its idempotency gates (the lab's takeover variants
 * included), and the route that validates a charge body and runs it through one of them.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { systemClock, type Clock, type IdempotencyStore, type TakeoverPolicy } from 'idem';
import { idempotency, problem, readBytes, type HandlerContext } from 'idem/http';
import type { AppOptions } from './app.js';
import { parseCharge, type ChargeParams } from './charge-body.js';
import { crashedStore, labFaults, type LabJournal } from './lab-journal.js';
import { pinnedTakeover } from './lab-pin.js';
import { declinedResponse, labTakeover, labTakeoverOf, reconcileFromLedger } from './lab-takeover.js';
import { draftCharge, type NewCharge } from './ledger.js';

export const MAX_BODY_BYTES = 1_048_576;
/** A charge body larger than this is fingerprinted in an event-loop turn after the one that parsed it. */
const SPLIT_TURN_BYTES = 65_536;
/**
 * Resolves once the event loop has been round: its timers and its I/O have run. One `setImmediate` from an I/O
 * callback runs in the same round, before any other I/O; the second runs in the next.
 */
async function roundTheLoop(): Promise<void> {
  await nextTurn();
  await nextTurn();
}
/** The longest `Idem-Lab-Delay-Ms` honoured. */
export const MAX_LAB_DELAY_MS = 60_000;

export const json = (body: unknown, status = 200): Response =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });

/** What the charge route reads from the app it belongs to (app.ts `createApp`). */
export interface ChargeRouteDeps {
  readonly options: AppOptions;
  readonly accountOf: (request: Request) => string | undefined;
  /** Lab mode: each sandbox account's requests, read back after each one (lab-journal.ts). */
  readonly journal: LabJournal | undefined;
  /** Sandbox requests whose work did not run: the fault headers do not cut their answers. */
  readonly answered: WeakSet<Request>;
  /** The start-up's marking of interrupted requests: lab charges wait for it. */
  readonly recovered: () => Promise<unknown>;
}

/** `POST /v1/charges` for an authenticated account: validates the body, then runs the charge under its gate. */
export function chargeRoute(deps: ChargeRouteDeps): { post(request: Request, account: string): Promise<Response> } {
  const { options, accountOf, journal, answered } = deps;
  const { store, ledger, lab } = options;
  const gateOptions = {
    scope: (request: Request) => accountOf(request) as string,
    ttlMs: options.ttlMs,
    leaseMs: options.leaseMs,
    cacheSize: options.cacheSize ?? 0,
    mismatchStatus: options.mismatchStatus,
    maxBodyBytes: MAX_BODY_BYTES,
    ...(lab && options.clockSkewMs ? { clock: skewedClock(options.clockSkewMs) } : {}),
  };
  /** Each charge's body, parsed once before the claim: the work reads it here rather than parsing the body again. */
  const parsed = new WeakMap<Request, ChargeParams>();
  /** Runs `gate` on a request (the one it is given: the lab's journal makes its own) with `params` as its parsed body. */
  const withParams =
    (gate: (request: Request) => Promise<Response>, params: ChargeParams) =>
    (request: Request): Promise<Response> => {
      parsed.set(request, params);
      return gate(request);
    };

  const chargeWork = chargeWorkOf(deps, parsed);
  const createCharge = idempotency<unknown>({
    store,
    ...gateOptions,
    ...(options.onEvent ? { onEvent: options.onEvent } : {}),
  })(chargeWork);
  /**
   * Lab: the journaled request whose gate is running, in its own async context. The `reconcile` hook is called in
   * the context of the request that took the key over, so its finding goes to that request's history entry only.
   */
  const asking = new AsyncLocalStorage<Request>();
  const reconcile = reconcileFromLedger(ledger, (found) => {
    const request = asking.getStore();
    if (!request || !journal) return;
    if (found.state === 'not_done') journal.note(request, { reconciled: 'not_done' });
    else if (found.chargeId)
      journal.note(request, {
        reconciled: found.state,
        recordId: found.recordId,
        chargeId: found.chargeId,
        found: true,
      });
  });
  /**
   * Lab: the route under a takeover policy (`Idem-Lab-Takeover`), and as an attempt that dies after calling the
   * processor (`Idem-Lab-Fault: crash`): its claim is real; nothing after it is written. Built once each.
   */
  const labGates = new Map<string, (request: Request) => Promise<Response>>([['rerun', createCharge]]);
  const labGate = (takeover: TakeoverPolicy, crash: boolean): ((request: Request) => Promise<Response>) => {
    const name = `${takeover}${crash ? ' crash' : ''}`;
    let gate = labGates.get(name);
    if (!gate) {
      gate = idempotency<unknown>({
        store: crash ? crashedStore(store as IdempotencyStore<unknown>) : store,
        ...gateOptions,
        takeover,
        ...(takeover === 'reconcile' ? { reconcile } : {}),
        ...(options.onEvent && !crash ? { onEvent: options.onEvent } : {}),
      })(chargeWork);
      labGates.set(name, gate);
    }
    return gate;
  };
  return {
    post: async (request: Request, account: string): Promise<Response> => {
      // Validate before the idempotency layer: a request that fails validation changes nothing, stores nothing.
      const body = await readBytes(request.body, MAX_BODY_BYTES);
      const params = parseCharge(body, request.headers.get('content-type'));
      if (params instanceof Response) return params;
      const asked = lab ? labTakeover(request.headers) : undefined;
      if (asked instanceof Response) return asked;
      // Parsing a large body and its fingerprint (canonical JSON) each hold the event loop for milliseconds: they
      // run in turns of their own, so another client's request waits for one of them, not both (bench:worst).
      if (body.byteLength > SPLIT_TURN_BYTES) await roundTheLoop();
      const charge = new Request(request.url, {
        method: 'POST',
        headers: request.headers,
        body: body as Uint8Array<ArrayBuffer>,
      });
      const chosen = asked ? labGate(asked.takeover, labFaults(request.headers).crash) : createCharge;
      const gate = withParams(chosen, params);
      if (!journal || !account.startsWith('acct_lab_')) return gate(charge);
      await deps.recovered();
      // A key keeps the takeover policy of its first attempt (lab-pin.ts): another one is refused, nothing run.
      const key = request.headers.get('idempotency-key');
      const pinned =
        key === null || !asked ? undefined : await pinnedTakeover(store, ledger, account, key, asked.takeover);
      if (pinned) {
        answered.add(request); // Nothing ran: a fault header does not cut this answer.
        return pinned;
      }
      const response = await journal.charge(account, charge, params, (journaled) =>
        asking.run(journaled, () => gate(journaled)),
      );
      if (!journal.cuts(response)) answered.add(request);
      return response;
    },
  };
}

/** The charge's work: the lab's faults, then the charge written to the ledger (once per record when protected). */
function chargeWorkOf(
  deps: ChargeRouteDeps,
  parsed: WeakMap<Request, ChargeParams>,
): (request: Request, context: HandlerContext<unknown>) => Promise<Response> {
  const { options, accountOf, journal } = deps;
  const { ledger, sharedLedger, lab } = options;
  return async (request: Request, context: HandlerContext<unknown>): Promise<Response> => {
    const account = accountOf(request) as string;
    const params = parsed.get(request);
    if (params === undefined) throw new Error('demo: a charge reached its work without its parsed body');
    journal?.note(request, { recordId: context.protected ? context.id : null, reclaimed: context.reclaimed });
    const faults = lab ? labFaults(request.headers) : undefined;
    if (faults) {
      if (faults.delayMs > 0)
        await sleep(Math.min(faults.delayMs, MAX_LAB_DELAY_MS), undefined, { signal: context.signal });
      if (faults.fail) {
        journal?.note(request, { work: 'processor-failed' });
        return problem({
          status: 503,
          slug: 'processor-unavailable',
          title: 'Card processor unavailable',
          detail: 'Retry with the same Idempotency-Key.',
        });
      }
    }
    const declined = params.source === 'tok_chargeDeclined';
    const input: NewCharge = {
      account,
      ...params,
      status: declined ? 'failed' : 'succeeded',
      failureCode: declined ? 'card_declined' : null,
      // A keyless lab charge carries its request's ref, so the lab can find it after a restart.
      ref: context.protected ? context.id : (journal?.refOf(request) ?? null),
    };
    const drafted = draftCharge(input);
    let charge = drafted;
    if (!context.protected) await ledger.insert(charge, input);
    // Lab: a processor without keys keeps the record id as a reference only, and charges every call.
    else if (lab && labTakeoverOf(request.headers).keyless)
      await ledger.insert(charge, { ...input, ref: `${context.id}/${charge.id}` });
    else if (sharedLedger) context.declare({ effects: (tx) => ledger.insertIn(tx, charge, input) });
    else charge = await ledger.insertOnce(charge, { ...input, ref: context.id });
    context.declare({ resultId: charge.id });
    journal?.note(request, {
      work: faults?.crash ? 'crashed' : declined ? 'declined' : 'charged',
      chargeId: charge.id,
      found: charge !== drafted,
    });
    if (charge.status === 'failed') return declinedResponse(charge);
    return json(charge, 201);
  };
}

/** The wall clock offset by `skewMs` (timers are unchanged: a skewed clock still ticks at the same rate). */
function skewedClock(skewMs: number): Clock {
  return { ...systemClock, now: () => Date.now() + skewMs };
}
