/**
 * @module `probe()`: the first request, then the table of checks, each isolated, then the report.
 */
import { randomUUID } from 'node:crypto';
import { redact, redactUrl } from '../../core/store-url.js';
import { CommandError } from '../args.js';
import { describe } from './answers.js';
import { concurrent } from './checks/concurrent.js';
import { malformedKey } from './checks/malformed-key.js';
import { missingKey } from './checks/missing-key.js';
import { keyOrder } from './checks/key-order.js';
import { mismatch } from './checks/mismatch.js';
import { replay } from './checks/replay.js';
import { effects, type CheckContext, type CheckSpec, type Measured } from './context.js';
import { ResponseTooLarge, headerMask, reason, requester } from './http.js';
import {
  CHECK_IDS,
  DASH,
  MAX_RESPONSE_BYTES,
  TITLES,
  unjudged,
  type Answer,
  type Check,
  type ProbeOptions,
  type ProbeReport,
} from './model.js';
import { tamper } from './payload.js';

/** The checks after the first, in the order they run; each entry reports its ids. */
const CHECKS: readonly CheckSpec[] = [replay, keyOrder, mismatch, concurrent, missingKey, malformedKey];

/**
 * Runs the checks against `url` and returns the report. Never throws for what the server answers; throws a
 * {@link CommandError} only when it cannot probe at all (the URL unreachable, the count URL not a number).
 *
 * @example
 * const report = await probe({ url: 'http://127.0.0.1:4000/v1/charges', body: '{"amount":500}', headers: [['Authorization', 'Bearer sk_test_alice']] })
 * if (!report.ok) process.exitCode = 1
 */
export async function probe({
  url,
  method = 'POST',
  headers = [],
  body,
  tamperedBody = tamper(body),
  countUrl,
  countPath,
  concurrency = 10,
  delayHeader,
  keyHeader = 'Idempotency-Key',
  replayHeader = 'Idempotent-Replayed',
  sfString = false,
  timeoutMs = 30_000,
  maxResponseBytes = MAX_RESPONSE_BYTES,
  skip = [],
  onCheck = () => {},
}: ProbeOptions): Promise<ProbeReport> {
  const checks: Check[] = [];
  const skipped = new Set(skip);
  // Every -H value masked wherever the server's words are printed (the table, --json, the errors): it may echo them.
  const hide = headerMask(headers);
  const add = (check: Check): void => {
    const shown = { ...check, observed: hide(check.observed) };
    checks.push(shown);
    onCheck(shown);
  };
  const http = requester({
    url,
    method,
    headers,
    keyHeader,
    sfString,
    timeoutMs,
    maxResponseBytes,
    countUrl,
    countPath,
  });
  const measured = async <T>(fn: () => Promise<T>): Promise<Measured<T>> => {
    const before = await http.count();
    const value = await fn();
    const after = await http.count();
    return { value, delta: before === null || after === null ? null : after - before };
  };

  const key = randomUUID();
  const first = await firstRequest(url, () => measured(() => http.send(key, body)), add, hide);
  if (first === undefined) {
    for (const id of CHECK_IDS.slice(1)) add(unjudged(id, 'skip', 'skipped: the first request failed'));
  } else {
    const context: CheckContext = {
      body,
      tamperedBody,
      concurrency,
      delayHeader,
      keyHeader,
      replayHeader,
      key,
      first,
      wants: (id) => !skipped.has(id),
      add,
      send: http.send,
      measured,
      isReplay: (answer) => (answer.headers.get(replayHeader) ?? '').toLowerCase() === 'true',
    };
    for (const spec of CHECKS) await guarded(spec, context, checks);
  }

  const order = new Map(CHECK_IDS.map((id, i) => [id, i]));
  const sorted = [...checks].sort((a, b) => (order.get(a.id) ?? 0) - (order.get(b.id) ?? 0));
  const summary = { pass: 0, fail: 0, warn: 0, skip: 0 };
  for (const check of sorted) summary[check.result]++;
  const sideEffects = countUrl !== undefined ? 'counted' : 'inferred';
  // The URL as printed (the report's header, --json): its user info and credential parameters masked.
  const shown = redactUrl(url);
  return {
    url: shown,
    method,
    ok: summary.fail === 0,
    sideEffects,
    body,
    tamperedBody,
    concurrency,
    summary,
    checks: sorted,
  };
}

/**
 * The first request with a fresh key: the baseline every other check compares against. Adds the `first` check and
 * returns its answer, or undefined when it failed (then nothing else means anything).
 */
async function firstRequest(
  url: string,
  send: () => Promise<Measured<Answer>>,
  add: (check: Check) => void,
  hide: (text: string) => string,
): Promise<Answer | undefined> {
  let run: Measured<Answer>;
  try {
    run = await send();
  } catch (error) {
    if (error instanceof CommandError) throw error;
    if (error instanceof ResponseTooLarge) {
      add(unjudged('first', 'fail', error.message));
      return undefined;
    }
    throw new CommandError(`cannot reach ${redactUrl(url)}: ${hide(redact(reason(error), url))}`, { cause: error });
  }
  const first = run.value;
  const ok2xx = first.status >= 200 && first.status < 300;
  const miscounted = run.delta !== null && run.delta !== 1;
  let observed = `${describe(first)}, ${first.body.byteLength} bytes${effects(run.delta)}`;
  if (!ok2xx)
    observed += ' — the first request must succeed for the other checks to mean anything (check -H and --body)';
  else if (miscounted) observed += ' (expected 1: does --count-url count what this endpoint does?)';
  const result = !ok2xx || miscounted ? 'fail' : 'pass';
  add({ id: 'first', title: TITLES.first, result, ietf: DASH, stripe: DASH, observed });
  return result === 'pass' ? first : undefined;
}

/**
 * Runs one entry of the table, isolated: a network error (or an answer over the size limit) fails that entry's
 * checks, not the probe. Checks skipped with `--skip`, or never added, are reported as skipped.
 */
async function guarded(spec: CheckSpec, context: CheckContext, checks: readonly Check[]): Promise<void> {
  const { ids } = spec;
  const skipped = (id: (typeof ids)[number]) => !context.wants(id);
  if (ids.every(skipped)) {
    for (const id of ids) context.add(unjudged(id, 'skip', 'skipped (--skip)'));
    return;
  }
  const before = checks.length;
  const missing = () => ids.filter((id) => !checks.slice(before).some((c) => c.id === id));
  try {
    await spec.run(context);
  } catch (error) {
    if (error instanceof CommandError) throw error;
    for (const id of missing().filter((id) => !skipped(id)))
      context.add(unjudged(id, 'fail', `request failed: ${reason(error)}`));
  }
  for (const id of missing()) context.add(unjudged(id, 'skip', 'skipped (--skip)'));
}
