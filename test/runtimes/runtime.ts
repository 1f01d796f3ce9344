/**
 * @module Which runtime is running this bundle, by its own globals: `Bun`, `Deno`, or Node's `process`.
 */
interface Globals {
  readonly Bun?: { readonly version: string };
  readonly Deno?: { readonly version: { readonly deno: string } };
  readonly process?: { readonly versions?: { readonly node?: string } };
}

/** `bun 1.4.5`, `deno 2.9.6`, `node 22.23.3`, or `unknown`. */
export function runtimeName(): string {
  const g = globalThis as Globals;
  if (g.Bun) return `bun ${g.Bun.version}`;
  if (g.Deno) return `deno ${g.Deno.version.deno}`;
  if (g.process?.versions?.node) return `node ${g.process.versions.node}`;
  return 'unknown';
}
