/**
 * @module The test-only runtimes — Next.js, workerd, Bun, Deno, NestJS 12 — installed on first use, so that
 * `npm ci` at the root installs only what the demo and the library need. Each lives in `test/runtimes/<name>/`
 * with its own `package.json` and committed `package-lock.json`; the first test that needs one runs `npm ci`
 * there (one progress line), and a stamp named after the lock's hash marks the install complete. A second run
 * finds the stamp and starts nothing (offline-safe); a changed lock installs again. Test files running at once
 * wait for each other's install through a lock folder in the temp directory.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export type RuntimeName = 'next' | 'workerd' | 'bun' | 'deno' | 'nest12';

/** An install that has not finished after this long is taken to have died with its process. */
const STALE_MS = 15 * 60_000;

const RUNTIMES = fileURLToPath(new URL('.', import.meta.url));

/** `test/runtimes/<name>`, whose `node_modules` holds the runtime once {@link ensureRuntime} has returned it. */
export const runtimeDir = (name: RuntimeName): string => join(RUNTIMES, name);

const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

function stampOf(dir: string): string {
  const lock = readFileSync(join(dir, 'package-lock.json'));
  return join(dir, 'node_modules', `.idem-installed-${createHash('sha256').update(lock).digest('hex').slice(0, 16)}`);
}

/**
 * The runtime's folder, installed first if its stamp is missing; or the reason it could not be installed (offline
 * with an empty npm cache, say), as one line. Synchronous, so that module-level code can find binaries with it.
 */
export function ensureRuntime(name: RuntimeName): { dir: string } | { error: string } {
  const dir = runtimeDir(name);
  const stamp = stampOf(dir);
  if (existsSync(stamp)) return { dir };
  const lock = join(tmpdir(), `idem-runtime-${createHash('sha256').update(dir).digest('hex').slice(0, 16)}.lock`);
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      if (existsSync(stamp)) return { dir };
      if (Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()) > STALE_MS) {
        rmdirSync(lock);
      }
      sleep(500);
    }
  }
  try {
    if (existsSync(stamp)) return { dir };
    const started = Date.now();
    process.stderr.write(`[idem] installing the ${name} test runtime on first use: npm ci in ${dir}\n`);
    const npm = spawnSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], {
      cwd: dir,
      encoding: 'utf8',
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: STALE_MS - 60_000,
    });
    if (npm.status !== 0) {
      const reason = npm.error?.message ?? npm.stderr.trim().split('\n').at(-1) ?? `exit ${String(npm.status)}`;
      return { error: `npm ci in ${dir} failed (${reason})` };
    }
    writeFileSync(stamp, `installed in ${Math.round((Date.now() - started) / 1000)} s\n`);
    return { dir };
  } finally {
    rmdirSync(lock);
  }
}
