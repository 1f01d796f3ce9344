/**
 * The demo's `idem serve`: every bad configuration is one line on stderr and exit code 2, never a stack trace.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../apps/demo/src/config.js';
import { tempDir } from '../harness.js';
import { demoServe } from './helpers.js';

const LAB = { IDEM_LAB: '1', PORT: '0', IDEM_LEDGER: ':memory:' };

/** The message line, then the pointer to --help: nothing else, no stack frame. */
function oneLine(stderr: string): string {
  const lines = stderr.trimEnd().split('\n');
  expect(lines.slice(1)).toEqual(['Run "idem serve --help" for usage.']);
  expect(stderr).not.toMatch(/\n\s+at /);
  return lines[0] as string;
}

describe.concurrent('idem serve: a bad configuration is one line and exit 2', () => {
  it('IDEM_TTL_MS shorter than the lease', async () => {
    const { code, stdout, stderr } = await demoServe(['--store', 'memory:'], {
      ...LAB,
      IDEM_TTL_MS: '5000',
      IDEM_LEASE_MS: '10000',
    });
    expect([code, stdout]).toEqual([2, '']);
    expect(oneLine(stderr)).toBe(
      'idem serve: IDEM_TTL_MS (--ttl-ms) must be greater than IDEM_LEASE_MS (--lease-ms, 10000), got 5000: a record cannot expire while its claim holds it.',
    );
  });

  it('IDEM_LEDGER with a URL scheme other than sqlite:', async () => {
    const { code, stderr } = await demoServe(['--store', 'memory:'], { ...LAB, IDEM_LEDGER: 'postgres://db/ledger' });
    expect(code).toBe(2);
    expect(oneLine(stderr)).toBe(
      'idem serve: IDEM_LEDGER (--ledger) must be a SQLite file path (or sqlite:<path>, or :memory:), got "postgres://db/ledger".',
    );
  });

  it('--store dynamodb:local without the dev-only dynalite package', async () => {
    const dir = tempDir();
    try {
      // Hides dynalite from require(), as on an install without development dependencies.
      const hide = join(dir.path, 'hide-dynalite.cjs');
      writeFileSync(
        hide,
        `const Module = require('node:module');
const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === 'dynalite') throw Object.assign(new Error("Cannot find module 'dynalite'"), { code: 'MODULE_NOT_FOUND' });
  return load.call(this, request, ...rest);
};
`,
      );
      const { code, stderr } = await demoServe(['--store', 'dynamodb:local'], LAB, { preload: hide });
      expect(code).toBe(2);
      expect(oneLine(stderr)).toBe(
        'idem serve: IDEM_STORE=dynamodb:local needs the development package "dynalite": install it (npm install --save-dev dynalite).',
      );
    } finally {
      dir.remove();
    }
  });

  it('an unknown flag', async () => {
    const { code, stderr } = await demoServe(['--bogus', '1'], LAB);
    expect(code).toBe(2);
    expect(oneLine(stderr)).toMatch(/^idem serve: Unknown option '--bogus'/);
  });
});

describe('IDEM_LEDGER=sqlite:<path>', () => {
  it('is the file at <path>, not a file named "sqlite:<path>"', () => {
    const dir = tempDir();
    try {
      const path = join(dir.path, 'ledger.db');
      expect(loadConfig({ IDEM_LEDGER: `sqlite:${path}` }).ledger).toBe(path);
      expect(existsSync(`sqlite:${path}`)).toBe(false);
    } finally {
      dir.remove();
    }
  });
});
