/**
 * @module `idem probe URL`: checks, with real requests, that any HTTP endpoint claiming to honour
 * `Idempotency-Key` really does — replay byte for byte, one execution under concurrency, refusal of a reused key
 * with another payload — and grades what it sees against the IETF draft and Stripe's behaviour. The command is
 * here; the checks, the HTTP and the report are in `probe/`.
 */
import { parseArgs } from 'node:util';
import { redactUrl } from '../core/store-url.js';
import { UsageError, headerOption, integerOption, usage, type Io } from './args.js';
import { CHECK_IDS, MAX_RESPONSE_BYTES, type CheckId, type ProbeOptions } from './probe/model.js';
import { tamper } from './probe/payload.js';
import { formatJson, formatReport } from './probe/report.js';
import { probe } from './probe/run.js';

export { visible } from './escape.js';
export {
  CHECK_IDS,
  MAX_RESPONSE_BYTES,
  type Check,
  type CheckId,
  type CheckResult,
  type ProbeOptions,
  type ProbeReport,
  type ProfileVerdict,
} from './probe/model.js';
export { tamper } from './probe/payload.js';
export { formatJson, formatReport } from './probe/report.js';
export { probe } from './probe/run.js';

/** The largest `--max-response-bytes`: 1 GiB. */
const MAX_RESPONSE_BYTES_CAP = 1024 * 1024 * 1024;

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
  --max-response-bytes N       the most read of one answer's body (default ${MAX_RESPONSE_BYTES}, 4 MiB); past it
                               the check fails and the connection is dropped
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
        'max-response-bytes': { type: 'string' },
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
    maxResponseBytes: integerOption(
      command,
      'max-response-bytes',
      values['max-response-bytes'],
      MAX_RESPONSE_BYTES,
      MAX_RESPONSE_BYTES_CAP,
    ),
    skip,
    onCheck: (check) => io.stderr(`  ${check.result.padEnd(4)}  ${check.title}\n`),
  };
  const result = await probe(options);
  io.stdout(values.json ? formatJson(result) : formatReport(result));
  return result.ok ? 0 : 1;
}

/** An http(s) URL without user info (fetch refuses one); errors show it redacted. */
function httpUrl(command: string, name: string, raw: string): string {
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new UsageError(command, `${name} must be an absolute http(s) URL, got "${redactUrl(raw)}".`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new UsageError(command, `${name} must be an http(s) URL, got "${redactUrl(raw)}".`);
  }
  if (parsed.username !== '' || parsed.password !== '') {
    throw new UsageError(
      command,
      `${name} must not carry a user name or password (got "${redactUrl(raw)}"): send credentials with -H, e.g. -H 'Authorization: Basic …'.`,
    );
  }
  return parsed.toString();
}
