/**
 * @module The runtimes the example tests reuse from `test/runtimes/` (installed there on first use, install.ts),
 * rather than installing them again into each example.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ensureRuntime, type RuntimeName } from '../runtimes/install.js';

/** Where each runtime's binary is: the platform package's own file, else the link npm made to it. */
const BINARIES: Partial<Record<RuntimeName, readonly string[]>> = {
  bun: ['@oven/bun-linux-x64/bin/bun', '.bin/bun'],
  deno: ['@deno/linux-x64-glibc/deno', '.bin/deno'],
  workerd: ['@cloudflare/workerd-linux-64/bin/workerd', '.bin/workerd'],
};

/** The runtime's binary, installed first if need be; throws the install's one-line reason. */
export function runtimeBinary(name: 'bun' | 'deno' | 'workerd'): string {
  const installed = ensureRuntime(name);
  if ('error' in installed) throw new Error(`the ${name} runtime is missing: ${installed.error}`);
  const found = (BINARIES[name] ?? []).map((path) => join(installed.dir, 'node_modules', path)).find(existsSync);
  if (found === undefined) throw new Error(`the ${name} runtime has no binary in ${installed.dir}/node_modules`);
  return found;
}

/** A package of a runtime installed under test/runtimes (`next`, `react`, …), for an example to link. */
export function runtimePackage(name: RuntimeName, dependency: string): string {
  const installed = ensureRuntime(name);
  if ('error' in installed) throw new Error(`the ${name} runtime is missing: ${installed.error}`);
  return join(installed.dir, 'node_modules', dependency);
}

/** How each runtime runs an example's entry file: the command and its arguments. */
export function serveCommand(runtime: 'node' | 'bun' | 'deno', file: string): [string, string[]] {
  if (runtime === 'node') return [process.execPath, [file]];
  if (runtime === 'bun') return [runtimeBinary('bun'), [file]];
  return [runtimeBinary('deno'), ['run', '--allow-net', '--allow-env', file]];
}
