/**
 * CHANGELOG's 0.2.0 Package entry states the tarball's size, file count and module subpaths: they are what
 * `npm pack --json` measures (of the build in packages/idem/dist: `npm test` builds first). Files and subpaths
 * exactly; the size within 10%, as every change of the code moves it by some bytes.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PKG = `${ROOT}packages/idem`;

describe('CHANGELOG: the package entry', () => {
  it('states the packed size, files and module subpaths npm pack measures', () => {
    const [packed] = JSON.parse(
      execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: PKG, encoding: 'utf8' }),
    ) as Array<{ size: number; entryCount: number }>;
    const exported = Object.keys(
      (JSON.parse(readFileSync(`${PKG}/package.json`, 'utf8')) as { exports: Record<string, unknown> }).exports,
    ).filter((key) => key !== './package.json' && !key.endsWith('.sql'));
    const stated = /\((\d+) kB packed, (\d+) files,\s+(\d+) module subpaths\)/.exec(
      readFileSync(`${ROOT}CHANGELOG.md`, 'utf8'),
    );
    expect(stated?.slice(2).map(Number)).toEqual([packed?.entryCount, exported.length]);
    expect(Math.abs(Number(stated?.[1]) * 1000 - (packed?.size ?? 0)) / (packed?.size ?? 1)).toBeLessThan(0.1);
  });
});
