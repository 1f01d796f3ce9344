/**
 * @module The lab's takeover switches (docs/DEMO.md: lab mode): per request, the takeover policy the charge route
 * runs under (`Idem-Lab-Takeover: rerun | reconcile | quarantine`, docs/DESIGN.md: Takeover policy) and whether the
 * card processor takes the record's id as its key (`Idem-Lab-Processor: keyless`: it keeps the id as a reference
 * but charges every call, so a takeover under `'rerun'` charges twice). The demo's `reconcile` hook asks the ledger.
 */
import type { ReconcileContext, TakeoverPolicy } from 'idem';
import { problem, type HttpReconcileAnswer } from 'idem/http';
import type { Charge, Ledger } from './ledger.js';

export const TAKEOVER_HEADER = 'idem-lab-takeover';
export const PROCESSOR_HEADER = 'idem-lab-processor';
const POLICIES: readonly TakeoverPolicy[] = ['rerun', 'reconcile', 'quarantine'];
const PROCESSORS = ['keyed', 'keyless'] as const;

/** What the switches ask for; absent headers are today's defaults (`'rerun'`, a processor keyed on the record id). */
export interface LabTakeover {
  readonly takeover: TakeoverPolicy;
  readonly keyless: boolean;
}

/**
 * The switches `headers` ask for, or the 400 problem+json for a value that is none of the known ones (checked before
 * the journal and the idempotency layer: the request changes nothing).
 *
 * @example
 * const asked = labTakeover(request.headers)
 * if (asked instanceof Response) return asked
 */
export function labTakeover(headers: Headers): LabTakeover | Response {
  const takeover = headers.get(TAKEOVER_HEADER) ?? 'rerun';
  const processor = headers.get(PROCESSOR_HEADER) ?? 'keyed';
  if (!(POLICIES as readonly string[]).includes(takeover))
    return invalidHeader('Idem-Lab-Takeover', takeover, POLICIES);
  if (!(PROCESSORS as readonly string[]).includes(processor))
    return invalidHeader('Idem-Lab-Processor', processor, PROCESSORS);
  return { takeover: takeover as TakeoverPolicy, keyless: processor === 'keyless' };
}

/** The switches as the journal records them: a malformed value (refused before the journal) reads as the default. */
export function labTakeoverOf(headers: Headers): LabTakeover {
  const asked = labTakeover(headers);
  return asked instanceof Response ? { takeover: 'rerun', keyless: false } : asked;
}

function invalidHeader(name: string, value: string, allowed: readonly string[]): Response {
  return problem({
    status: 400,
    slug: 'parameter-invalid',
    title: 'Invalid parameter',
    detail: `\`${name}\` must be ${allowed.map((a) => `\`${a}\``).join(' or ')}, not ${JSON.stringify(value.slice(0, 40))}: nothing was run.`,
    extensions: { param: name },
  });
}

/** The 402 a declined charge answers with (the work's own, and a reconciled one's). */
export function declinedResponse(charge: Pick<Charge, 'id'>): Response {
  return problem({
    status: 402,
    slug: 'card-declined',
    title: 'Card declined',
    detail: 'The card was declined.',
    extensions: { code: 'card_declined', charge: charge.id },
  });
}

/** What the hook found, for the lab's history: the charge it replayed, or none (the work ran). */
export interface Reconciled {
  readonly state: 'succeeded' | 'failed' | 'not_done';
  readonly chargeId: string | null;
  /** The record the hook was asked about. */
  readonly recordId: string;
}

/**
 * The demo's `reconcile` hook: asks the ledger for the charge made for the record's id (under the id, or as a
 * keyless processor's reference). A charge found is the answer (201 with it, or its 402); none is `not_done`, and
 * the work runs. `seen` is told each answer, in the async context of the request whose takeover asked.
 *
 * @example
 * idempotency({ store, scope, takeover: 'reconcile', reconcile: reconcileFromLedger(ledger) })
 */
export function reconcileFromLedger(
  ledger: Pick<Ledger, 'byRecord'>,
  seen?: (found: Reconciled) => void,
): (context: ReconcileContext) => Promise<HttpReconcileAnswer> {
  return async ({ id, scope }) => {
    const charge = await ledger.byRecord(scope, id);
    if (!charge) {
      seen?.({ state: 'not_done', chargeId: null, recordId: id });
      return { state: 'not_done' };
    }
    const state = charge.status === 'failed' ? 'failed' : 'succeeded';
    seen?.({ state, chargeId: charge.id, recordId: id });
    const response =
      state === 'failed'
        ? declinedResponse(charge)
        : new Response(JSON.stringify(charge), { status: 201, headers: { 'content-type': 'application/json' } });
    return { state, response, resultId: charge.id };
  };
}
