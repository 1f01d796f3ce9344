/**
 * @module `idem probe URL`: checks, with real requests, that any HTTP endpoint claiming to honour
 * `Idempotency-Key` really does — replay byte for byte, one execution under concurrency, refusal of a reused key
 * with another payload — and grades what it sees against the IETF draft and Stripe's behaviour.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { CommandError, UsageError, headerOption, integerOption, table, usage, type Io } from './args.js';
import { safeJson, visible } from './escape.js';

export { visible } from './escape.js';

export type CheckId =
  | 'first'
  | 'replay'
  | 'replay-marker'
  | 'key-order'
  | 'mismatch'
  | 'concurrent'
  | 'conflict'
  | 'missing-key'
  | 'malformed-key';

export const CHECK_IDS: readonly CheckId[] = [
  'first',
  'replay',
  'replay-marker',
  'key-order',
  'mismatch',
  'concurrent',
  'conflict',
  'missing-key',
  'malformed-key',
];

/** `warn`: not what the check hoped for, but no request was executed twice or answered wrongly. Only `fail` fails the probe. */
export type CheckResult = 'pass' | 'fail' | 'warn' | 'skip';

/** How one profile grades a check: `ok: null` when the profile says nothing about it. */
export interface ProfileVerdict {
  readonly ok: boolean | null;
  readonly note: string;
}

export interface Check {
  readonly id: CheckId;
  readonly title: string;
  readonly result: CheckResult;
  /** draft-ietf-httpapi-idempotency-key-header. */
  readonly ietf: ProfileVerdict;
  /** Stripe's documented behaviour. */
  readonly stripe: ProfileVerdict;
  /** What was seen, in words. */
  readonly observed: string;
}

export interface ProbeReport {
  readonly url: string;
  readonly method: string;
  /** False when any check failed. */
  readonly ok: boolean;
  /** How executions were counted: by `--count-url`, or inferred from distinct response bodies. */
  readonly sideEffects: 'counted' | 'inferred';
  readonly body: string;
  readonly tamperedBody: string;
  readonly concurrency: number;
  readonly summary: Readonly<Record<CheckResult, number>>;
  readonly checks: readonly Check[];
}

export interface ProbeOptions {
  readonly url: string;
  /** Default `POST`. */
  readonly method?: string;
  /** Sent with every request, and with the count request (e.g. the API's `Authorization`). */
  readonly headers?: ReadonlyArray<readonly [string, string]>;
  /** The JSON payload. */
  readonly body: string;
  /** The payload for the reused-key check. Default: derived from `body` by changing one number (or string). */
  readonly tamperedBody?: string;
  /** A GET that returns the number of side effects (e.g. charges), as a bare number or JSON at `countPath`. */
  readonly countUrl?: string;
  /** A dotted path into the count URL's JSON, e.g. `count` or `data.total`. */
  readonly countPath?: string;
  /** Simultaneous duplicates in the concurrency check. Default 10. */
  readonly concurrency?: number;
  /** A header the API honours to hold the work (e.g. `Idem-Lab-Delay-Ms: 500`), sent with the duplicates. */
  readonly delayHeader?: readonly [string, string];
  /** Default `Idempotency-Key`. */
  readonly keyHeader?: string;
  /** Default `Idempotent-Replayed` (Stripe's). */
  readonly replayHeader?: string;
  /** Send keys as RFC 8941 sf-strings (`"…"`), as the IETF draft writes them. Default: bare, as Stripe does. */
  readonly sfString?: boolean;
  /** Per-request timeout. Default 30 s. */
  readonly timeoutMs?: number;
  readonly skip?: readonly CheckId[];
  /** Called as each check completes (the CLI prints progress to stderr). */
  readonly onCheck?: (check: Check) => void;
}

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: Uint8Array;
}

const DASH: ProfileVerdict = { ok: null, note: '' };
const yes = (note = ''): ProfileVerdict => ({ ok: true, note });
const no = (note: string): ProfileVerdict => ({ ok: false, note });
const unsaid = (note = ''): ProfileVerdict => ({ ok: null, note });

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
  skip = [],
  onCheck = () => {},
}: ProbeOptions): Promise<ProbeReport> {
  const checks: Check[] = [];
  const skipped = new Set(skip);
  const add = (check: Check): void => {
    checks.push(check);
    onCheck(check);
  };
  const counted = countUrl !== undefined;

  async function send(
    key: string | null,
    payload: string,
    extra: ReadonlyArray<readonly [string, string]> = [],
  ): Promise<Answer> {
    const h = new Headers();
    for (const [name, value] of headers) h.append(name, value);
    if (!h.has('content-type')) h.set('content-type', 'application/json');
    if (key !== null) h.set(keyHeader, sfString ? `"${key.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"` : key);
    for (const [name, value] of extra) h.set(name, value);
    // Never follow a redirect: it would re-send the body, the key and the caller's headers to another origin, and
    // the probe judges the answer the server gave, which a 3xx is.
    const response = await fetch(url, {
      method,
      headers: h,
      body: payload,
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
    return { status: response.status, headers: response.headers, body: new Uint8Array(await response.arrayBuffer()) };
  }

  async function count(): Promise<number | null> {
    if (countUrl === undefined) return null;
    const h = new Headers();
    for (const [name, value] of headers) h.append(name, value);
    let response: Response;
    try {
      response = await fetch(countUrl, { headers: h, redirect: 'manual', signal: AbortSignal.timeout(timeoutMs) });
    } catch (error) {
      throw new CommandError(`cannot read --count-url ${countUrl}: ${reason(error)}`, { cause: error });
    }
    const text = await response.text();
    if (!response.ok)
      throw new CommandError(`--count-url ${countUrl} answered ${response.status}: ${visible(text.slice(0, 200))}`);
    return readCount(text, countPath, countUrl);
  }

  /** Runs `fn` between two counts: the side effects it caused, or null when not counted. */
  async function measured<T>(fn: () => Promise<T>): Promise<{ value: T; delta: number | null }> {
    const before = await count();
    const value = await fn();
    const after = await count();
    return { value, delta: before === null || after === null ? null : after - before };
  }

  const effects = (delta: number | null): string =>
    delta === null ? '' : `; ${delta} side effect${delta === 1 ? '' : 's'}`;
  const isReplay = (a: Answer): boolean => (a.headers.get(replayHeader) ?? '').toLowerCase() === 'true';

  // 1. The first request with a fresh key: the baseline every other check compares against.
  const k1 = randomUUID();
  let first: Answer;
  {
    let run: { value: Answer; delta: number | null };
    try {
      run = await measured(() => send(k1, body));
    } catch (error) {
      if (error instanceof CommandError) throw error;
      throw new CommandError(`cannot reach ${url}: ${reason(error)}`, { cause: error });
    }
    first = run.value;
    const ok2xx = first.status >= 200 && first.status < 300;
    const result: CheckResult = !ok2xx || (run.delta !== null && run.delta !== 1) ? 'fail' : 'pass';
    let observed = `${describe(first)}, ${first.body.byteLength} bytes${effects(run.delta)}`;
    if (!ok2xx)
      observed += ' — the first request must succeed for the other checks to mean anything (check -H and --body)';
    else if (run.delta !== null && run.delta !== 1)
      observed += ' (expected 1: does --count-url count what this endpoint does?)';
    add({ id: 'first', title: 'first request runs once', result, ietf: DASH, stripe: DASH, observed });
    if (result === 'fail') {
      for (const id of CHECK_IDS.slice(1)) {
        add({
          id,
          title: TITLES[id],
          result: 'skip',
          ietf: DASH,
          stripe: DASH,
          observed: 'skipped: the first request failed',
        });
      }
      return report();
    }
  }

  // Each remaining check is isolated: a network error fails that check, not the probe.
  const guarded = async (ids: readonly CheckId[], fn: () => Promise<void>): Promise<void> => {
    if (ids.every((id) => skipped.has(id))) {
      for (const id of ids)
        add({ id, title: TITLES[id], result: 'skip', ietf: DASH, stripe: DASH, observed: 'skipped (--skip)' });
      return;
    }
    const before = checks.length;
    const missing = () => ids.filter((id) => !checks.slice(before).some((c) => c.id === id));
    try {
      await fn();
    } catch (error) {
      if (error instanceof CommandError) throw error;
      for (const id of missing().filter((id) => !skipped.has(id))) {
        add({
          id,
          title: TITLES[id],
          result: 'fail',
          ietf: DASH,
          stripe: DASH,
          observed: `request failed: ${reason(error)}`,
        });
      }
    }
    for (const id of missing())
      add({ id, title: TITLES[id], result: 'skip', ietf: DASH, stripe: DASH, observed: 'skipped (--skip)' });
  };

  // 2. A retry with the same key and payload replays the first answer, byte for byte, without running again.
  let retry: Answer | undefined;
  await guarded(['replay', 'replay-marker'], async () => {
    const run = await measured(() => send(k1, body));
    retry = run.value;
    const same = sameAnswer(first, retry);
    const ranAgain = run.delta !== null && run.delta > 0;
    const ok = same && !ranAgain;
    const observed = same
      ? `${describe(retry)}, ${retry.body.byteLength} bytes, byte-identical${effects(run.delta)}`
      : `${difference(first, retry)}${effects(run.delta)}`;
    if (!skipped.has('replay')) {
      add({
        id: 'replay',
        title: TITLES.replay,
        result: ok ? 'pass' : 'fail',
        ietf: ok ? yes() : no('SHOULD replay'),
        stripe: ok ? yes() : no('replays'),
        observed: ranAgain ? `${observed} — the retry ran the work again` : observed,
      });
    }
    // 3. The replay marker: Stripe's `Idempotent-Replayed: true`; the draft defines none.
    if (!skipped.has('replay-marker')) {
      const onRetry = retry.headers.get(replayHeader);
      const onFirst = first.headers.get(replayHeader);
      const marked = isReplay(retry) && !isReplay(first);
      add({
        id: 'replay-marker',
        title: TITLES['replay-marker'],
        result: marked ? 'pass' : 'warn',
        ietf: unsaid('not in the draft'),
        stripe: marked ? yes() : no(`sends ${replayHeader}: true`),
        observed: marked
          ? `${replayHeader}: ${visible(onRetry ?? '')} on the replay, absent on the first answer`
          : onRetry === null
            ? `no ${replayHeader} header on the replay: a client cannot tell a replay from a fresh execution`
            : `${replayHeader}: ${visible(onRetry)} on the replay, ${onFirst === null ? 'absent' : `"${visible(onFirst)}"`} on the first answer`,
      });
    }
  });

  // 4. The same payload with its JSON keys reordered and re-spaced is the same request: replayed, not refused.
  await guarded(['key-order'], async () => {
    const reordered = reorder(body);
    if (reordered === undefined) {
      add({
        id: 'key-order',
        title: TITLES['key-order'],
        result: 'skip',
        ietf: DASH,
        stripe: DASH,
        observed: 'skipped: --body is not a JSON object or array',
      });
      return;
    }
    const run = await measured(() => send(k1, reordered));
    const answer = run.value;
    const same = sameAnswer(first, answer) && !(run.delta !== null && run.delta > 0);
    const refused = answer.status === 400 || answer.status === 422;
    add({
      id: 'key-order',
      title: TITLES['key-order'],
      result: same ? 'pass' : 'fail',
      ietf: unsaid('fingerprint is the server’s choice'),
      stripe: same ? yes() : no('compares parameters'),
      observed: same
        ? `keys reordered and re-spaced: replayed (${describe(answer)}, byte-identical)${effects(run.delta)}`
        : refused
          ? `keys reordered and re-spaced: refused as another payload (${describe(answer)}) — the fingerprint hashes raw bytes, so a client that re-serialises cannot retry${effects(run.delta)}`
          : `keys reordered and re-spaced: ${difference(first, answer)}${effects(run.delta)}`,
    });
  });

  // 5. The same key with another payload is refused (400 Stripe, 422 draft), runs nothing, replays nothing.
  await guarded(['mismatch'], async () => {
    const run = await measured(() => send(k1, tamperedBody));
    const answer = run.value;
    const refused = answer.status === 400 || answer.status === 422;
    const ranAgain = run.delta !== null && run.delta > 0;
    let result: CheckResult;
    let observed: string;
    if (answer.status >= 200 && answer.status < 300) {
      result = 'fail';
      observed = sameAnswer(first, answer)
        ? `${describe(answer)}: replayed the first answer to another payload instead of refusing it (the fingerprint is not checked)`
        : `${describe(answer)}: ran the other payload under the same key`;
      observed += effects(run.delta);
    } else if (refused && !ranAgain) {
      // Control: is the tampered payload acceptable on its own? Otherwise the refusal may be validation, not the key.
      const control = await measured(() => send(randomUUID(), tamperedBody));
      const valid = control.value.status >= 200 && control.value.status < 300;
      result = valid ? 'pass' : 'warn';
      observed = `${describe(answer)}${effects(run.delta)}; control: the same payload with a fresh key → ${control.value.status}`;
      if (!valid)
        observed += ' — the refusal may be validation, not the key (pass --tampered-body with a valid payload)';
    } else {
      result = answer.status >= 500 || ranAgain ? 'fail' : 'warn';
      observed = `${describe(answer)}${effects(run.delta)}${ranAgain ? ' — the work ran again' : ''}`;
    }
    const ok = result !== 'fail' && refused;
    add({
      id: 'mismatch',
      title: TITLES.mismatch,
      result,
      ietf: ok && answer.status === 422 ? yes('422') : no('wants 422'),
      stripe: ok && answer.status === 400 ? yes('400') : no('wants 400'),
      observed,
    });
  });

  // 6. Simultaneous duplicates: one execution; the others 409 with Retry-After (or the same answer, replayed).
  await guarded(['concurrent', 'conflict'], async () => {
    const k2 = randomUUID();
    const extra = delayHeader ? [delayHeader] : [];
    const run = await measured(async () => {
      const settled = await Promise.allSettled(Array.from({ length: concurrency }, () => send(k2, body, extra)));
      const followUp = await send(k2, body);
      return { settled, followUp };
    });
    const answers = run.value.settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const errors = run.value.settled.length - answers.length;
    const successes = answers.filter((a) => a.status >= 200 && a.status < 300);
    const distinct = new Set(successes.map((a) => Buffer.from(a.body).toString('base64')));
    const conflicts = answers.filter((a) => a.status === 409);
    const others = answers.filter((a) => !(a.status >= 200 && a.status < 300) && a.status !== 409);
    const followUp = run.value.followUp;
    // Executions: counted when we can; otherwise each distinct successful body is one (two charges differ in id).
    const executions = run.delta ?? distinct.size;
    const winner = successes.find((a) => !isReplay(a)) ?? successes[0];
    const followUpSame = winner !== undefined && sameAnswer(winner, followUp);
    const once = executions === 1 && distinct.size <= 1 && followUpSame;
    const statuses = tally(answers.map((a) => a.status));

    if (!skipped.has('concurrent')) {
      let observed = `${concurrency} at once: ${statuses}${errors ? `, ${errors} failed to connect` : ''}; `;
      observed +=
        run.delta === null
          ? `${distinct.size} distinct success bod${distinct.size === 1 ? 'y' : 'ies'}`
          : `${run.delta} side effect${run.delta === 1 ? '' : 's'}`;
      observed += followUpSame
        ? '; a later retry replays the winner'
        : `; a later retry: ${winner ? difference(winner, followUp) : describe(followUp)}`;
      if (executions > 1) observed += ` — executed ${executions} times`;
      add({
        id: 'concurrent',
        title: TITLES.concurrent,
        result: once ? 'pass' : 'fail',
        ietf: once ? yes() : no('one execution'),
        stripe: once ? yes() : no('one execution'),
        observed,
      });
    }
    if (!skipped.has('conflict')) {
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
        observed = delayHeader
          ? 'no 409: every duplicate got the same answer (the server waits for the first attempt instead of refusing)'
          : 'no 409 observed: no duplicate overlapped the first attempt — pass --delay-header to hold the work';
      }
      if (others.some((a) => a.status >= 500)) result = 'fail';
      if (others.length) observed += `; also ${tally(others.map((a) => a.status))}`;
      const got409 = conflicts.length > 0;
      add({
        id: 'conflict',
        title: TITLES.conflict,
        result,
        ietf: got409 ? yes('409') : executions > 1 ? no('wants 409') : unsaid(),
        stripe: got409 ? yes('409') : executions > 1 ? no('wants 409') : unsaid(),
        observed,
      });
    }
  });

  // 7. No key: either refused (400: the route requires keys) or run unprotected (keys optional). Report which.
  await guarded(['missing-key'], async () => {
    const run = await measured(() => send(null, body));
    const answer = run.value;
    const ran = answer.status >= 200 && answer.status < 300;
    const result: CheckResult = answer.status >= 500 ? 'fail' : ran || answer.status === 400 ? 'pass' : 'warn';
    add({
      id: 'missing-key',
      title: TITLES['missing-key'],
      result,
      ietf: answer.status === 400 ? yes('400: key required') : unsaid('silent when keys are optional'),
      stripe: ran ? yes('optional') : unsaid('Stripe runs it'),
      observed: ran
        ? `${describe(answer)}: ran without protection (keys are optional here)${effects(run.delta)}`
        : answer.status === 400
          ? `${describe(answer)}: refused — this route requires a key${effects(run.delta)}`
          : `${describe(answer)}${effects(run.delta)}`,
    });
  });

  // 8. Malformed keys: empty, and longer than the 255 characters Stripe allows.
  await guarded(['malformed-key'], async () => {
    const cases: Array<[string, string]> = [
      ['empty', ''],
      ['300 chars', 'k'.repeat(300)],
    ];
    const seen: string[] = [];
    let result: CheckResult = 'pass';
    let longRefused = false;
    let total: number | null = 0;
    for (const [label, key] of cases) {
      const run = await measured(() => send(null, body, [[keyHeader, key]]));
      const answer = run.value;
      total = total === null || run.delta === null ? null : total + run.delta;
      seen.push(`${label} → ${describe(answer)}`);
      if (answer.status >= 500) result = 'fail';
      else if (answer.status < 400 && result !== 'fail') result = 'warn';
      if (label === '300 chars') longRefused = answer.status === 400;
    }
    add({
      id: 'malformed-key',
      title: TITLES['malformed-key'],
      result,
      ietf: unsaid('not specified'),
      stripe: longRefused ? yes('≤ 255 chars') : no('refuses > 255 chars'),
      observed: seen.join('; ') + effects(total) + (result === 'warn' ? ' — accepted a malformed key' : ''),
    });
  });

  return report();

  function report(): ProbeReport {
    const order = new Map(CHECK_IDS.map((id, i) => [id, i]));
    const sorted = [...checks].sort((a, b) => (order.get(a.id) ?? 0) - (order.get(b.id) ?? 0));
    const summary = { pass: 0, fail: 0, warn: 0, skip: 0 };
    for (const check of sorted) summary[check.result]++;
    return {
      url,
      method,
      ok: summary.fail === 0,
      sideEffects: counted ? 'counted' : 'inferred',
      body,
      tamperedBody,
      concurrency,
      summary,
      checks: sorted,
    };
  }
}

const TITLES: Readonly<Record<CheckId, string>> = {
  first: 'first request runs once',
  replay: 'retry replays the first answer',
  'replay-marker': 'replay is marked',
  'key-order': 'JSON key order is the same request',
  mismatch: 'reused key, other payload: refused',
  concurrent: 'concurrent duplicates run once',
  conflict: 'concurrent duplicate gets 409',
  'missing-key': 'missing key',
  'malformed-key': 'malformed key',
};

/**
 * The payload for the reused-key check: the first number in `body` plus one, or else the first string with
 * `-tampered` appended. Throws a {@link UsageError} when `body` has neither.
 *
 * @example
 * tamper('{"amount":500,"currency":"usd"}') // → '{"amount":501,"currency":"usd"}'
 */
export function tamper(body: string): string {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw new UsageError('probe', `--body must be JSON, got ${JSON.stringify(body.slice(0, 80))}.`);
  }
  const change = (node: unknown, kind: 'number' | 'string'): { done: boolean; node: unknown } => {
    if (typeof node === kind)
      return { done: true, node: kind === 'number' ? (node as number) + 1 : `${node as string}-tampered` };
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const r = change(node[i], kind);
        if (r.done) return { done: true, node: node.map((v: unknown, j) => (j === i ? r.node : v)) };
      }
    } else if (node !== null && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        const r = change(v, kind);
        if (r.done) return { done: true, node: { ...node, [k]: r.node } };
      }
    }
    return { done: false, node };
  };
  for (const kind of ['number', 'string'] as const) {
    const r = change(value, kind);
    if (r.done) return JSON.stringify(r.node);
  }
  throw new UsageError('probe', '--body has no number or string to change: pass --tampered-body.');
}

/** The same JSON with every object's keys reversed and whitespace added; undefined when `body` is not an object or array. */
function reorder(body: string): string | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (value === null || typeof value !== 'object') return undefined;
  const reverse = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(reverse);
    if (node !== null && typeof node === 'object') {
      return Object.fromEntries(
        Object.entries(node)
          .reverse()
          .map(([k, v]) => [k, reverse(v)]),
      );
    }
    return node;
  };
  return JSON.stringify(reverse(value), null, 1);
}

/** Reads the count from a bare number or JSON (at `path`, dotted). */
function readCount(text: string, path: string | undefined, url: string): number {
  let value: unknown = text.trim();
  if (path !== undefined) {
    try {
      value = JSON.parse(text);
    } catch {
      throw new CommandError(
        `--count-url ${url} did not answer JSON, so --count-path ${path} cannot apply: ${visible(text.slice(0, 200))}`,
      );
    }
    for (const part of path.split('.').filter(Boolean)) {
      value = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[part] : undefined;
    }
  }
  const number = typeof value === 'number' ? value : typeof value === 'string' && value !== '' ? Number(value) : NaN;
  if (!Number.isFinite(number)) {
    throw new CommandError(
      `--count-url ${url}${path ? ` at --count-path ${path}` : ''} is not a number (got ${visible(`${JSON.stringify(value)?.slice(0, 120)}`)})`,
    );
  }
  return number;
}

function sameAnswer(a: Answer, b: Answer): boolean {
  return a.status === b.status && Buffer.from(a.body).equals(Buffer.from(b.body));
}

function difference(first: Answer, other: Answer): string {
  if (first.status !== other.status) return `${describe(other)} instead of ${first.status}`;
  const length = Math.min(first.body.byteLength, other.body.byteLength);
  let at = 0;
  while (at < length && first.body[at] === other.body[at]) at++;
  return `${other.status} with another body (${other.body.byteLength} bytes vs ${first.body.byteLength}; differs from byte ${at})`;
}

/** The status and, for an error, its machine-readable type (problem+json `type`, or Stripe's `error.type`/`code`). */
function describe(answer: Answer): string {
  const type = answer.status >= 400 ? problemType(answer) : undefined;
  return type ? `${answer.status} ${type}` : String(answer.status);
}

function problemType(answer: Answer): string | undefined {
  try {
    const parsed = JSON.parse(new TextDecoder().decode(answer.body)) as Record<string, unknown>;
    const error = parsed.error as Record<string, unknown> | undefined;
    const found = parsed.type ?? error?.code ?? error?.type ?? parsed.code;
    return typeof found === 'string' ? visible(found) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The report as JSON (2-space indent, a final newline) with no character a terminal acts on (see `safeJson`).
 * The text parses to the same report.
 *
 * @example
 * io.stdout(formatJson(await probe(options)))
 */
export function formatJson(report: ProbeReport): string {
  return `${safeJson(report, 2)}\n`;
}

function tally(statuses: readonly number[]): string {
  const counts = new Map<number, number>();
  for (const s of statuses) counts.set(s, (counts.get(s) ?? 0) + 1);
  return (
    [...counts]
      .sort(([a], [b]) => a - b)
      .map(([s, n]) => `${n} × ${s}`)
      .join(', ') || 'no answers'
  );
}

function reason(error: unknown): string {
  if (!(error instanceof Error)) return visible(String(error));
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return visible(`${error.message}${cause}`);
}

/**
 * The report as a table for people: one row per check, the two profiles' verdicts beside the result.
 *
 * @example
 * io.stdout(formatReport(await probe(options)))
 */
export function formatReport(report: ProbeReport): string {
  const mark = (v: ProfileVerdict): string =>
    v.ok === null ? '·' : `${v.ok ? '✓' : '✗'}${v.note ? ` ${v.note}` : ''}`;
  // Server text is made visible where it enters `observed`; every cell is escaped again here, whatever its origin,
  // but for the backslash (a second pass must not double the first one's escapes).
  const rows = report.checks.map((c) =>
    [c.title, c.result.toUpperCase(), mark(c.ietf), mark(c.stripe), c.observed].map((cell) =>
      visible(cell, { backslash: false }),
    ),
  );
  const { pass, warn, fail, skip } = report.summary;
  return [
    `idem probe: ${visible(report.method)} ${visible(report.url)}`,
    `payload ${visible(report.body)} · tampered ${visible(report.tamperedBody)} · ${report.concurrency} concurrent · side effects ${report.sideEffects === 'counted' ? 'counted by --count-url' : 'inferred from distinct bodies (pass --count-url to count them)'}`,
    '',
    table([['CHECK', 'RESULT', 'IETF DRAFT', 'STRIPE', 'OBSERVED'], ...rows]).trimEnd(),
    '',
    `${report.checks.length} checks: ${pass} pass, ${warn} warn, ${fail} fail, ${skip} skip — ${report.ok ? 'OK' : 'FAILED'}`,
    'IETF DRAFT = draft-ietf-httpapi-idempotency-key-header; STRIPE = Stripe’s documented behaviour. ✓ matches, ✗ differs, · not specified.',
    '',
  ].join('\n');
}

export const PROBE_HELP = `Usage: idem probe URL [options]

Checks, with real requests, that an endpoint honours Idempotency-Key: a retry replays the first answer byte for
byte; simultaneous duplicates run once (the others get 409 with Retry-After); a reused key with another payload is
refused (400 or 422); JSON key order does not change the fingerprint; a missing or malformed key is handled; the
replay is marked. Prints a pass/fail table graded against the IETF draft and Stripe. Exit 0 all pass (warnings
allowed), 1 a check failed or the endpoint could not be probed, 2 wrong arguments.

The probe sends real requests — about 10 plus --concurrency, and several of them execute (a charge is a
charge): point it at a test environment.

Options:
  -H, --header 'Name: value'   sent with every request and with --count-url (repeatable), e.g. the API key
  --body JSON                  the payload (default {"amount":500,"currency":"usd"})
  --tampered-body JSON         the other payload for the reused key (default: --body with a number + 1)
  --count-url URL              a GET returning the number of side effects (a bare number, or JSON with --count-path)
  --count-path PATH            dotted path into --count-url's JSON, e.g. count or data.total
  --concurrency N              simultaneous duplicates (default 10, at most 200)
  --delay-header 'Name: value' a header the API honours to hold the work, sent with the duplicates
  --method METHOD              default POST
  --key-header NAME            default Idempotency-Key
  --replay-header NAME         default Idempotent-Replayed
  --sf-string                  send keys as RFC 8941 strings ("…"), as the IETF draft writes them
  --timeout-ms N               per request (default 30000)
  --skip CHECK                 skip a check (repeatable): ${CHECK_IDS.slice(1).join(', ')}
  --json                       print the report as JSON

Examples:
  idem probe http://127.0.0.1:4000/v1/charges -H 'Authorization: Bearer sk_test_alice' \\
    --body '{"amount":500,"currency":"usd"}' --count-url http://127.0.0.1:4000/v1/balance --count-path count \\
    --delay-header 'Idem-Lab-Delay-Ms: 500'
  idem probe https://api.example.test/orders -H "Authorization: Bearer $TOKEN" --body '{"sku":"A1","qty":1}' --json
`;

/**
 * `idem probe URL [options]`.
 *
 * @example
 * process.exitCode = await probeCommand(['http://127.0.0.1:4000/v1/charges', '--body', '{"amount":500}'], io)
 */
export async function probeCommand(args: readonly string[], io: Io): Promise<number> {
  const command = 'probe';
  const { values, positionals } = usage(command, () =>
    parseArgs({
      args: [...args],
      options: {
        header: { type: 'string', short: 'H', multiple: true },
        body: { type: 'string' },
        'tampered-body': { type: 'string' },
        'count-url': { type: 'string' },
        'count-path': { type: 'string' },
        concurrency: { type: 'string' },
        'delay-header': { type: 'string' },
        method: { type: 'string' },
        'key-header': { type: 'string' },
        'replay-header': { type: 'string' },
        'sf-string': { type: 'boolean' },
        'timeout-ms': { type: 'string' },
        skip: { type: 'string', multiple: true },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: true,
    }),
  );
  if (values.help) {
    io.stdout(PROBE_HELP);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError(command, `give exactly one URL, got ${positionals.length}.`);
  const url = httpUrl(command, 'URL', positionals[0] as string);
  const countUrl = values['count-url'] === undefined ? undefined : httpUrl(command, '--count-url', values['count-url']);
  if (values['count-path'] !== undefined && countUrl === undefined)
    throw new UsageError(command, '--count-path needs --count-url.');
  const body = values.body ?? '{"amount":500,"currency":"usd"}';
  const tamperedBody = values['tampered-body'];
  if (tamperedBody !== undefined) {
    if (tamperedBody === body) throw new UsageError(command, '--tampered-body must differ from --body.');
  }
  const derived = tamperedBody ?? tamper(body);
  const skip = (values.skip ?? []).map((id) => {
    if (!(CHECK_IDS as readonly string[]).includes(id) || id === 'first') {
      throw new UsageError(command, `--skip takes one of ${CHECK_IDS.slice(1).join(', ')}; got "${id}".`);
    }
    return id as CheckId;
  });
  const method = (values.method ?? 'POST').toUpperCase();
  if (!/^[A-Z]+$/.test(method) || method === 'GET' || method === 'HEAD') {
    throw new UsageError(
      command,
      `--method must be a method with a body (POST, PATCH, PUT…), got "${values.method ?? ''}".`,
    );
  }
  const options: ProbeOptions = {
    url,
    method,
    headers: (values.header ?? []).map((raw) => headerOption(command, 'header', raw)),
    body,
    tamperedBody: derived,
    ...(countUrl !== undefined ? { countUrl } : {}),
    ...(values['count-path'] !== undefined ? { countPath: values['count-path'] } : {}),
    concurrency: integerOption(command, 'concurrency', values.concurrency, 10, 200),
    ...(values['delay-header'] !== undefined
      ? { delayHeader: headerOption(command, 'delay-header', values['delay-header']) }
      : {}),
    ...(values['key-header'] !== undefined
      ? { keyHeader: headerOption(command, 'key-header', `${values['key-header']}:`)[0] }
      : {}),
    ...(values['replay-header'] !== undefined
      ? { replayHeader: headerOption(command, 'replay-header', `${values['replay-header']}:`)[0] }
      : {}),
    sfString: values['sf-string'] === true,
    timeoutMs: integerOption(command, 'timeout-ms', values['timeout-ms'], 30_000),
    skip,
    onCheck: (check) => io.stderr(`  ${check.result.padEnd(4)}  ${check.title}\n`),
  };
  const result = await probe(options);
  io.stdout(values.json ? formatJson(result) : formatReport(result));
  return result.ok ? 0 : 1;
}

function httpUrl(command: string, name: string, raw: string): string {
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new UsageError(command, `${name} must be an absolute http(s) URL, got "${raw}".`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new UsageError(command, `${name} must be an http(s) URL, got "${raw}".`);
  }
  return parsed.toString();
}
