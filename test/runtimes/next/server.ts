/**
 * @module `next/server` from the Next.js installed on first use in `test/runtimes/next` (install.ts), typed here
 * for the part test/next uses: the root `npm ci` does not install Next.js, and `npm run typecheck` runs before it.
 */
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { ensureRuntime } from '../install.js';

export interface NextRequest extends Request {
  readonly nextUrl: URL;
  readonly cookies: { get(name: string): { readonly value: string } | undefined };
}

export interface NextResponse extends Response {
  readonly cookies: { set(name: string, value: string): unknown };
}

export interface NextServer {
  readonly NextRequest: new (input: string, init?: RequestInit) => NextRequest;
  readonly NextResponse: { json(body: unknown, init?: ResponseInit): NextResponse };
}

/** `next/server`, installing Next.js first if this is its first use; throws the install's one-line reason. */
export function nextServer(): NextServer {
  const installed = ensureRuntime('next');
  if ('error' in installed) throw new Error(`Next.js is missing: ${installed.error}`);
  return createRequire(join(installed.dir, 'package.json'))('next/server.js') as NextServer;
}
