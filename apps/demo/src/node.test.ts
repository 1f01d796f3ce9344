/**
 * The node bridge's connection limits (issue 7, item 5), in-process: the defaults suit an API (not node's 300 s
 * request timeout and no connection cap), and a bad option is refused by name. Their effect on a real process —
 * the cap closing extra connections, a 408 for slow headers, 401 before the body — is in
 * test/security/demo-hardening.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { App } from './app.js';
import { serve } from './node.js';

const app: App = Object.assign(async () => new Response('ok'), {
  dropsAfterCommit: () => false,
  admit: () => 'no-body' as const,
});

describe('serve: connection limits', () => {
  it('defaults: 256 connections, headers in 10 s, the whole request in 30 s, idle keep-alive 5 s', () => {
    const server = serve(app);
    expect([server.connectionCap, server.headersTimeout, server.requestTimeout, server.keepAliveTimeout]).toEqual([
      256, 10_000, 30_000, 5_000,
    ]);
    const tuned = serve(app, {
      maxConnections: 8,
      headersTimeoutMs: 500,
      requestTimeoutMs: 1_000,
      keepAliveTimeoutMs: 2_000,
    });
    expect([tuned.connectionCap, tuned.headersTimeout, tuned.requestTimeout, tuned.keepAliveTimeout]).toEqual([
      8, 500, 1_000, 2_000,
    ]);
  });

  it('refuses a limit that is not a positive integer, or headers allowed longer than the whole request, naming the option', () => {
    expect(() => serve(app, { maxConnections: 0 })).toThrow(
      'Expected `maxConnections` to be a positive integer, got 0.',
    );
    expect(() => serve(app, { requestTimeoutMs: 1.5 })).toThrow(
      'Expected `requestTimeoutMs` to be a positive integer, got 1.5.',
    );
    expect(() => serve(app, { headersTimeoutMs: 2_000, requestTimeoutMs: 1_000 })).toThrow(
      'Expected `headersTimeoutMs` to be at most `requestTimeoutMs`.',
    );
  });
});
