/**
 * @module Simultaneous duplicates: one execution; the others 409 with Retry-After (or the same answer, replayed).
 */
import { randomUUID } from 'node:crypto';
import { visible } from '../../escape.js';
import { describe, difference, problemType, sameAnswer, tally } from '../answers.js';
import type { CheckContext, CheckSpec } from '../context.js';
import { COUNT_HINT, TITLES, no, unsaid, yes, type Answer, type Check, type CheckResult } from '../model.js';

/** What the duplicates got, and how many times the work ran. */
interface Seen {
  readonly answers: readonly Answer[];
  /** Duplicates that got no answer at all. */
  readonly errors: number;
  readonly conflicts: readonly Answer[];
  /** Neither 2xx nor 409. */
  readonly others: readonly Answer[];
  readonly followUp: Answer;
  readonly delta: number | null;
  readonly distinct: number;
  readonly executions: number;
  readonly winner: Answer | undefined;
}

export const concurrent: CheckSpec = {
  ids: ['concurrent', 'conflict'],
  run: async (context) => {
    const seen = await duplicates(context);
    if (context.wants('concurrent')) context.add(once(context, seen));
    if (context.wants('conflict')) context.add(conflict(context, seen));
  },
};

async function duplicates(context: CheckContext): Promise<Seen> {
  const key = randomUUID();
  const extra = context.delayHeader ? [context.delayHeader] : [];
  const run = await context.measured(async () => {
    const settled = await Promise.allSettled(
      Array.from({ length: context.concurrency }, () => context.send(key, context.body, extra)),
    );
    const followUp = await context.send(key, context.body);
    return { settled, followUp };
  });
  const answers = run.value.settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const successes = answers.filter((a) => a.status >= 200 && a.status < 300);
  const distinct = new Set(successes.map((a) => Buffer.from(a.body).toString('base64'))).size;
  return {
    answers,
    errors: run.value.settled.length - answers.length,
    conflicts: answers.filter((a) => a.status === 409),
    others: answers.filter((a) => !(a.status >= 200 && a.status < 300) && a.status !== 409),
    followUp: run.value.followUp,
    delta: run.delta,
    distinct,
    // Executions: counted when we can; otherwise each distinct successful body is one (two charges differ in id).
    executions: run.delta ?? distinct,
    winner: successes.find((a) => !context.isReplay(a)) ?? successes[0],
  };
}

function once(context: CheckContext, seen: Seen): Check {
  const { delta, distinct, executions, winner, followUp } = seen;
  const followUpSame = winner !== undefined && sameAnswer(winner, followUp);
  const ok = executions === 1 && distinct <= 1 && followUpSame;
  // Without a count, one distinct body is all it sees: one execution, or several that answered alike.
  const result: CheckResult = !ok ? 'fail' : delta === null ? 'warn' : 'pass';
  const statuses = tally(seen.answers.map((a) => a.status));
  let observed = `${context.concurrency} at once: ${statuses}${seen.errors ? `, ${seen.errors} failed to connect` : ''}; `;
  observed +=
    delta === null
      ? `${distinct} distinct success bod${distinct === 1 ? 'y' : 'ies'}`
      : `${delta} side effect${delta === 1 ? '' : 's'}`;
  observed += followUpSame
    ? '; a later retry replays the winner'
    : `; a later retry: ${winner ? difference(winner, followUp) : describe(followUp)}`;
  if (executions > 1) observed += ` — executed ${executions} times`;
  if (result === 'warn') observed += ` — not counted: the work may have run more than once (${COUNT_HINT})`;
  const verdict = result === 'pass' ? yes() : result === 'warn' ? unsaid('not counted') : no('one execution');
  return { id: 'concurrent', title: TITLES.concurrent, result, ietf: verdict, stripe: verdict, observed };
}

function conflict(context: CheckContext, { conflicts, others, executions }: Seen): Check {
  const retryAfter = conflicts.map((a) => a.headers.get('retry-after'));
  const valid = retryAfter.filter(
    (v): v is string => v !== null && (/^\d+$/.test(v.trim()) || !Number.isNaN(Date.parse(v))),
  );
  let result: CheckResult;
  let observed: string;
  if (conflicts.length > 0) {
    result = valid.length === conflicts.length ? 'pass' : 'warn';
    const values = [...new Set(valid)].map((v) => visible(v)).join(', ');
    observed =
      valid.length === conflicts.length
        ? `${conflicts.length} × 409 with Retry-After: ${values}`
        : `${conflicts.length} × 409, ${conflicts.length - valid.length} without a valid Retry-After (a client cannot tell when to retry)`;
    const problems = [...new Set(conflicts.map((a) => problemType(a)).filter(Boolean))];
    if (problems.length) observed += ` (${problems.join(', ')})`;
  } else if (executions > 1) {
    result = 'fail';
    observed = `no 409: the duplicates ran (${executions} executions)`;
  } else {
    result = 'warn';
    observed = context.delayHeader
      ? 'no 409: every duplicate got the same answer (the server waits for the first attempt instead of refusing)'
      : 'no 409 observed: no duplicate overlapped the first attempt — pass --delay-header to hold the work';
  }
  if (others.some((a) => a.status >= 500)) result = 'fail';
  if (others.length) observed += `; also ${tally(others.map((a) => a.status))}`;
  const got409 = conflicts.length > 0;
  const verdict = got409 ? yes('409') : executions > 1 ? no('wants 409') : unsaid();
  return { id: 'conflict', title: TITLES.conflict, result, ietf: verdict, stripe: verdict, observed };
}
