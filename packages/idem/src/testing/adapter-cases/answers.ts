/**
 * @module The client side of the adapter conformance suite: how a case posts a charge and reads the answer, the
 * replies its handler gives, and the checks on what comes back.
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { expect } from 'vitest';
import { anySignal } from '../../core/signals.js';
import { DEFAULT_REPLAY_HEADERS } from '../../http/replay.js';
import type { SuiteReply } from '../adapter-harness.js';

/** The scope of every request that does not name another tenant. */
export const TENANT = 'acct_suite';
/** How long the suite waits for an answer before calling it a hang. */
export const ANSWER_MS = 5_000;
/** The lease of the cases that need one to lapse. */
export const SHORT_LEASE_MS = 300;

/**
 * Response headers a replay must reproduce exactly when the first answer had them: the default allow-list, but for
 * `content-encoding` (compressed answers have their own cases, in compression.ts).
 */
export const REPLAYED_HEADERS = DEFAULT_REPLAY_HEADERS.filter((name) => name !== 'content-encoding');

export interface PostInit {
  readonly key?: string;
  /** The suite's reference for the work: executions and ledger rows are counted by it. */
  readonly ref?: string;
  /** The JSON body; default `{ ref, amount: 50000, currency: 'usd' }`. It must carry `ref`. */
  readonly body?: { readonly ref: string } & Record<string, unknown>;
  readonly query?: string;
  readonly tenant?: string;
  readonly headers?: Record<string, string>;
  readonly signal?: AbortSignal;
}

export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly bytes: Uint8Array;
  readonly text: string;
}

export const newKey = (): string => `key_${randomUUID()}`;
export const newRef = (): string => `ref_${randomUUID()}`;

/** The `ref` the suite's handler counts a request's work by. */
export function refOf(body: unknown): string {
  const ref = (body as { ref?: unknown } | null)?.ref;
  if (typeof ref !== 'string')
    throw new Error(`The suite's handler got a body without its ref: ${JSON.stringify(body)}`);
  return ref;
}

/** `POST <url>/v1/charges` as a client would send it; a hang past {@link ANSWER_MS} fails the case. */
export async function postCharge(
  url: string,
  { key, ref, body, query = '', tenant, headers = {}, signal }: PostInit,
): Promise<Answer> {
  const timeout = AbortSignal.timeout(ANSWER_MS);
  try {
    const response = await fetch(`${url}/v1/charges${query}`, {
      method: 'POST',
      redirect: 'manual',
      headers: {
        'content-type': 'application/json',
        ...(key === undefined ? {} : { 'idempotency-key': key }),
        ...(tenant === undefined ? {} : { 'x-tenant': tenant }),
        ...headers,
      },
      body: JSON.stringify(body ?? { ref, amount: 50_000, currency: 'usd' }),
      signal: signal ? anySignal([signal, timeout]) : timeout,
    });
    const bytes = new Uint8Array(await response.arrayBuffer());
    return { status: response.status, headers: response.headers, bytes, text: new TextDecoder().decode(bytes) };
  } catch (error) {
    if (timeout.aborted) throw new Error(`no answer within ${ANSWER_MS} ms (a hung response)`, { cause: error });
    throw error;
  }
}

/** The handler's 201 for its `n`th execution: `ch_<n>`, as JSON or streamed in three chunks. */
export const created = (n: number, style: 'json' | 'stream'): SuiteReply =>
  style === 'json'
    ? { style, status: 201, headers: { location: `/v1/charges/ch_${n}` }, json: { id: `ch_${n}`, amount: 50_000 } }
    : {
        style,
        status: 201,
        headers: { 'content-type': 'application/json', location: `/v1/charges/ch_${n}` },
        chunks: ['{"id":', `"ch_${n}",`, '"amount":50000}'],
      };
/** The bytes of {@link created}'s body, whichever style sent it. */
export const createdBody = (n: number): string => `{"id":"ch_${n}","amount":50000}`;
/** Status, body, Location and the replay mark: what most cases compare. */
export const summary = (a: Answer) => [
  a.status,
  a.text,
  a.headers.get('location'),
  a.headers.get('idempotent-replayed'),
];

export function expectProblem(answer: Answer, status: number, slug: string): void {
  let type: unknown = answer.text;
  try {
    type = (JSON.parse(answer.text) as { type?: unknown }).type;
  } catch {
    // Not JSON: the text itself shows in the failure.
  }
  expect([answer.status, answer.headers.get('content-type'), type]).toEqual([
    status,
    'application/problem+json',
    `urn:idem:problem:${slug}`,
  ]);
}

export interface RawAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** The body as it came over the wire, not decoded. */
  readonly bytes: Buffer;
}

/** A POST whose answer is read as raw bytes (fetch would decode gzip). */
export function rawPost(url: string, headers: Record<string, string>, body: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      url,
      { method: 'POST', agent: false, timeout: ANSWER_MS, headers: { 'content-type': 'application/json', ...headers } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, headers: response.headers, bytes: Buffer.concat(chunks) }),
        );
        response.on('error', reject);
      },
    );
    request.on('timeout', () => request.destroy(new Error(`no answer within ${ANSWER_MS} ms (a hung response)`)));
    request.on('error', reject);
    request.end(body);
  });
}
