/**
 * The engine compares fingerprints in constant time (issue 6, item 4) — shown structurally, not by timing:
 * every comparison it makes goes through `fingerprintsEqual`, which reads every character of equal-length inputs
 * (tested in src/core/fingerprint-hash.test.ts); and neither the engine nor the HTTP layer compares a
 * fingerprint with `===`/`!==`.
 * (Stores evaluate their claim condition in their own language — SQL `=`, Lua `==` — on the caller's own
 * scope only; see docs/RELIABILITY.md.)
 */
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type * as Fingerprint from '../../packages/idem/src/core/fingerprint.js';

vi.mock('../../packages/idem/src/core/fingerprint.js', async (importOriginal) => {
  const actual = await importOriginal<typeof Fingerprint>();
  return { ...actual, fingerprintsEqual: vi.fn(actual.fingerprintsEqual) };
});

const { fingerprintsEqual } = await import('../../packages/idem/src/core/fingerprint.js');
const { createEngine, isIdempotencyError } = await import('idem');
const { memoryStore } = await import('idem/stores/memory');

const A = 'a'.repeat(63) + '1';
const B = 'a'.repeat(63) + '2';
const response = { status: 201, headers: [] as Array<[string, string]>, body: new TextEncoder().encode('{}') };

describe('fingerprint comparison is constant-time by construction', () => {
  afterEach(() => vi.clearAllMocks());

  it('the engine decides mismatch and replay through fingerprintsEqual (stored first, incoming second)', async () => {
    const engine = createEngine({ store: memoryStore(), ttlMs: 60_000, leaseMs: 5_000 });
    const request = { scope: 's', key: 'k' };
    await engine.run({ ...request, fingerprint: A }, async () => ({ response }));
    vi.clearAllMocks();
    const mismatch = await engine
      .run({ ...request, fingerprint: B }, async () => ({ response }))
      .catch((error: unknown) => error);
    expect(isIdempotencyError(mismatch) && mismatch.code).toBe('FINGERPRINT_MISMATCH');
    expect(vi.mocked(fingerprintsEqual).mock.calls).toEqual([[A, B]]);
    vi.clearAllMocks();
    const replay = await engine.run({ ...request, fingerprint: A }, async () => ({ response }));
    expect(replay.replayed).toBe(true);
    expect(vi.mocked(fingerprintsEqual).mock.calls).toEqual([[A, A]]);
  });

  it('no ===/!== on a fingerprint anywhere in the engine or the HTTP layer', () => {
    const src = fileURLToPath(new URL('../../packages/idem/src/', import.meta.url));
    const files = [
      'core/engine.ts',
      ...readdirSync(`${src}http`)
        .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
        .map((f) => `http/${f}`),
    ];
    const offending = files.flatMap((file) =>
      readFileSync(`${src}${file}`, 'utf8')
        .split('\n')
        .filter((line) => /fingerprint\w*\s*[!=]==|[!=]==\s*[\w.]*fingerprint/i.test(line))
        .map((line) => `${file}: ${line.trim()}`),
    );
    expect(files).toContain('core/engine.ts');
    expect(offending).toEqual([]);
  });
});
