/**
 * @module `npm run mutants`: a mutation check the team can rerun. Each hand-planted mutant below is one small change
 * to the library's source — a guard dropped, a condition flipped, a write moved — of the kind a careless edit makes.
 * They are applied one at a time to a scratch copy of the repository (copied without node_modules, .git, dist and
 * test results; node_modules symlinked), and a fixed battery of fast tests runs against each, in order, stopping at
 * the first stage that fails: the mutant is *killed* by that stage, or it *survives* all of them.
 *
 *   unit   vitest: engine, fingerprint, memory and SQLite stores, the Web layer, the SQLite claim-condition test
 *   sim    the deterministic simulation, seeds 1…1500 (test/sim; the real engine and stores)
 *   fuzz   the key-reuse fuzz over the demo server (test/fuzz/reuse.test.ts), with a fixed seed
 *
 * A mutant whose text is no longer in its file (the source moved on) is *stale*: listed, not scored. The score is
 * killed / (killed + survived). The unmutated copy must pass every stage first, or nothing is scored.
 *
 *   npm run mutants                       every mutant (about 10 minutes on two shared cores)
 *   npm run mutants -- --only E1,M1       some of them
 *   npm run mutants -- --list             the list, with each mutant's file and whether it still applies
 *   npm run mutants -- --all-stages       run every stage for every mutant (which suites catch what; slower)
 *   npm run mutants -- --stages sim       only these stages (e.g. what the simulation alone catches)
 *   npm run mutants -- --head             copy the last commit (git archive HEAD) instead of the working tree
 *   npm run mutants -- --keep             keep the scratch copy (its path is printed)
 */
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

interface Mutant {
  readonly id: string;
  readonly file: string;
  /** What the mutant breaks, in a few words. */
  readonly what: string;
  /** Exact text that must occur exactly once in `file`, and what it becomes. */
  readonly find: string;
  readonly replace: string;
}

const MUTANTS: readonly Mutant[] = [
  // ── engine ──────────────────────────────────────────────────────────────────────────────────────────────────
  {
    id: 'E1',
    file: 'packages/idem/src/core/engine.ts',
    what: '503 classified as final',
    find: "if (status >= 400 && status < 500 && ![408, 409, 425, 429].includes(status)) return 'failed-final';",
    replace:
      "if ((status >= 400 && status < 500 && ![408, 409, 425, 429].includes(status)) || status === 503) return 'failed-final';",
  },
  {
    id: 'E2',
    file: 'packages/idem/src/core/engine.ts',
    what: '429 classified as final',
    find: '![408, 409, 425, 429].includes(status)',
    replace: '![408, 409, 425].includes(status)',
  },
  {
    id: 'E3',
    file: 'packages/idem/src/core/lease.ts',
    what: 'lease renewal never sent',
    find: '    if (now >= nextRenewalAt && !taken) {',
    replace: '    if (false) {',
  },
  {
    id: 'E4',
    file: 'packages/idem/src/core/lease.ts',
    what: 'renewal does not carry expiresAt forward',
    find: 'expiresAt = Math.max(expiresAt, now + leaseMs);',
    replace: '// (mutant) expiresAt left as the claim wrote it',
  },
  {
    id: 'E5',
    file: 'packages/idem/src/core/lease.ts',
    what: 'effects committed with a retryable outcome',
    find: "const final = kind !== 'failed-retryable' ? effects : undefined;",
    replace: 'const final = effects;',
  },
  {
    id: 'E6',
    file: 'packages/idem/src/core/lease.ts',
    what: 'a refused completion answered as a success (no record)',
    find: "if (!written.ok) return refusedWrite(held, 'complete');\n  executed(held, kind, response.status);",
    replace:
      "if (!written.ok && false) return refusedWrite(held, 'complete');\n  executed(held, kind, response.status);",
  },
  {
    id: 'E9',
    file: 'packages/idem/src/core/lease.ts',
    what: 'no local deadline: the holder waits to hear from the store that it lost',
    find: '    if (now >= deadline) abort(',
    replace: '    if (false) abort(',
  },
  {
    id: 'E10',
    file: 'packages/idem/src/core/engine.ts',
    what: 'store calls without a timeout',
    find: 'const value = await within(clock, fn(), timeoutMs, op);',
    replace: 'const value = await fn();',
  },
  {
    id: 'E11',
    file: 'packages/idem/src/core/lease.ts',
    what: 'work that never settles holds its key forever (no maxHoldMs)',
    find: '    if (now >= holdUntil) {',
    replace: '    if (false) {',
  },
  {
    id: 'E12',
    file: 'packages/idem/src/core/engine.ts',
    what: 'a claim answered past the deadline still runs the work',
    find: 'if (clock.now() >= now + leaseMs - leaseMarginMs) {',
    replace: 'if (false) {',
  },
  {
    id: 'E7',
    file: 'packages/idem/src/core/engine.ts',
    what: 'a retryable failure replayed',
    find: "(record.status === 'succeeded' || (record.status === 'failed' && !record.retryable))",
    replace: "(record.status === 'succeeded' || record.status === 'failed')",
  },
  {
    id: 'E8',
    file: 'packages/idem/src/core/engine.ts',
    what: 'fingerprint mismatch not checked on an existing record',
    find: 'if (!fingerprintsEqual(existing.fingerprint, request.fingerprint)) {',
    replace: 'if (false) {',
  },
  // ── fingerprint ─────────────────────────────────────────────────────────────────────────────────────────────
  {
    id: 'F1',
    file: 'packages/idem/src/core/canonical-json.ts',
    what: 'canonical JSON keeps key order (reordered JSON is another request)',
    find: 'if ((state & ORDERED) === 0) {',
    replace: 'if ((state & ORDERED) === -1) {',
  },
  {
    id: 'F2',
    file: 'packages/idem/src/core/fingerprint.ts',
    what: 'a JSON body left out of the fingerprint',
    find: '`${head}${kind}${canonical.byteLength}:${UTF8.decode(canonical)}${tail}`',
    replace: '`${head}${kind}0:${tail}`',
  },
  {
    id: 'F3',
    file: 'packages/idem/src/core/fingerprint.ts',
    what: 'the method left out of the fingerprint',
    find: 'field(input.method.toUpperCase())',
    replace: "field('POST')",
  },
  // ── the claim condition and the record a claim writes (shared by the stores) ─────────────────────────────────
  {
    id: 'R1',
    file: 'packages/idem/src/core/record.ts',
    what: 'expiry ignored by the claim',
    find: 'if (existing === null || existing.expiresAt <= now) return true;',
    replace: 'if (existing === null) return true;',
  },
  {
    id: 'R2',
    file: 'packages/idem/src/core/record.ts',
    what: 'takeover ignores the fingerprint',
    find: 'if (existing.fingerprint !== fingerprint) return false;',
    replace: '// (mutant) fingerprint not compared',
  },
  {
    id: 'R3',
    file: 'packages/idem/src/core/record.ts',
    what: 'the id is kept across an expiry (a new life reuses the old id)',
    find: 'const keepId = existing !== null && existing.expiresAt > request.now;',
    replace: 'const keepId = existing !== null;',
  },
  // ── memory store ────────────────────────────────────────────────────────────────────────────────────────────
  {
    id: 'M1',
    file: 'packages/idem/src/stores/memory/memory-store.ts',
    what: 'claim reads, yields once (await), then writes',
    find: '    const record = claimedRecord(existing, request);\n    this.#records.set(request.pk, record);',
    replace:
      '    await Promise.resolve();\n    const record = claimedRecord(existing, request);\n    this.#records.set(request.pk, record);',
  },
  {
    id: 'M2',
    file: 'packages/idem/src/stores/memory/memory-store.ts',
    what: 'renew does not write expiresAt',
    find: 'this.#records.set(pk, { ...record, leaseExpiresAt, expiresAt: Math.max(record.expiresAt, expiresAt) });',
    replace: 'this.#records.set(pk, { ...record, leaseExpiresAt });',
  },
  {
    id: 'M3',
    file: 'packages/idem/src/stores/memory/memory-store.ts',
    what: 'writes not fenced by the token',
    find: "record.status === 'in_progress' && record.token === token ? record : undefined",
    replace: "record.status === 'in_progress' ? record : undefined",
  },
  // ── SQLite store ────────────────────────────────────────────────────────────────────────────────────────────
  {
    id: 'S1',
    file: 'packages/idem/src/stores/sqlite/claim.ts',
    what: "the claim's SQL drops its fingerprint condition",
    find: 'OR (${t}."fingerprint" = excluded."fingerprint" AND (',
    replace: 'OR ((',
  },
  {
    id: 'S2',
    file: 'packages/idem/src/stores/sqlite/statements.ts',
    what: 'completion not fenced by the token',
    find: '"response_body" = @responseBody\n      WHERE "pk" = @pk AND "token" = @token AND "status" = \'in_progress\'',
    replace: '"response_body" = @responseBody\n      WHERE "pk" = @pk AND "status" = \'in_progress\'',
  },
  {
    id: 'S3',
    file: 'packages/idem/src/stores/sqlite/statements.ts',
    what: 'renew does not write expires_at',
    find: '@leaseExpiresAt),\n      "expires_at" = max("expires_at", @expiresAt) WHERE',
    replace: '@leaseExpiresAt) WHERE',
  },
  {
    id: 'S4',
    file: 'packages/idem/src/stores/sqlite/claim.ts',
    what: 'a takeover gets a new id (the work cannot find what the dead attempt did)',
    find: '"id" = CASE WHEN ${t}."expires_at" > @now THEN ${t}."id" ELSE excluded."id" END',
    replace: '"id" = excluded."id"',
  },
  // ── the Web layer ───────────────────────────────────────────────────────────────────────────────────────────
  {
    id: 'H1',
    file: 'packages/idem/src/http/replay.ts',
    what: 'a replay without Idempotent-Replayed: true',
    find: "headers.set(REPLAYED_HEADER, 'true');",
    replace: '// (mutant) no replay header',
  },
  {
    id: 'H2',
    file: 'packages/idem/src/http/problem.ts',
    what: 'a reused key answered 409, not 400',
    find: "status: mismatchStatus,\n        slug: 'idempotency-key-reused',",
    replace: "status: 409,\n        slug: 'idempotency-key-reused',",
  },
  {
    id: 'H3',
    file: 'packages/idem/src/http/problem.ts',
    what: 'a key in use answered 503, not 409',
    find: "IN_FLIGHT: { status: 409, slug: 'idempotency-key-in-use'",
    replace: "IN_FLIGHT: { status: 503, slug: 'idempotency-key-in-use'",
  },
];

interface Stage {
  readonly name: string;
  readonly argv: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
}

const UNIT_FILES = [
  'packages/idem/src/core/engine.test.ts',
  'packages/idem/src/core/lease.test.ts',
  'packages/idem/src/core/wait.test.ts',
  'packages/idem/src/core/fingerprint.test.ts',
  'packages/idem/src/stores/memory/index.test.ts',
  'packages/idem/src/stores/sqlite/',
  'packages/idem/src/http/middleware.test.ts',
  'packages/idem/src/http/conformance.test.ts',
  'test/stores/sqlite-condition.test.ts',
];
const VITEST = ['node_modules/vitest/vitest.mjs', 'run', '--bail=1', '--reporter=dot'];
const STAGES: readonly Stage[] = [
  { name: 'unit', argv: [...VITEST, ...UNIT_FILES] },
  { name: 'sim', argv: ['--import', 'tsx', 'test/sim/run.ts', '--seeds', '1500'] },
  { name: 'fuzz', argv: [...VITEST, 'test/fuzz/reuse.test.ts'], env: { IDEM_FUZZ_SEED: '20261201' } },
];
/** A stage that runs longer than this is stopped, and counts as failed (a mutant that hangs is caught). */
const STAGE_TIMEOUT_MS = 240_000;

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    list: { type: 'boolean', default: false },
    'all-stages': { type: 'boolean', default: false },
    stages: { type: 'string' },
    head: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
  },
});

const applies = (m: Mutant, text: string): number => text.split(m.find).length - 1;

if (values.list) {
  for (const m of MUTANTS) {
    const n = applies(m, readFileSync(join(ROOT, m.file), 'utf8'));
    console.log(
      `${m.id.padEnd(3)} ${m.file.padEnd(28)} ${n === 1 ? '' : n === 0 ? '(stale: text not found) ' : `(ambiguous: ${n} matches) `}${m.what}`,
    );
  }
  process.exit(0);
}

const only = values.only ? new Set(values.only.split(',')) : undefined;
const wanted = values.stages ? new Set(values.stages.split(',')) : undefined;
const stages = STAGES.filter((stage) => !wanted || wanted.has(stage.name));
if (stages.length === 0)
  throw new Error(`--stages: none of ${values.stages} is one of ${STAGES.map((s) => s.name).join(', ')}`);
const chosen = MUTANTS.filter((m) => !only || only.has(m.id));

/** The scratch copy: the working tree (or HEAD) without node_modules, .git, build output and test results. */
function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'idem-mutants-'));
  if (values.head) {
    const archive = spawnSync('git', ['archive', 'HEAD'], { cwd: ROOT, maxBuffer: 1 << 30 });
    if (archive.status !== 0) throw new Error(`git archive failed: ${archive.stderr.toString()}`);
    const untar = spawnSync('tar', ['-x', '-C', dir], { input: archive.stdout });
    if (untar.status !== 0) throw new Error(`tar failed: ${untar.stderr.toString()}`);
  } else {
    const skip = new Set(['node_modules', '.git', 'dist', 'test-results', 'coverage', '.idem']);
    cpSync(ROOT, dir, { recursive: true, filter: (source) => !skip.has(relative(ROOT, source).split('/')[0] ?? '') });
  }
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
  mkdirSync(join(dir, 'test-results'), { recursive: true });
  return dir;
}

/** Runs one stage in the copy, at low priority. Resolves whether it passed, and how long it took. */
function runStage(dir: string, stage: Stage): Promise<{ passed: boolean; ms: number; tail: string }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn('nice', ['-n', '10', process.execPath, ...stage.argv], {
      cwd: dir,
      env: { ...process.env, ...stage.env, NODE_NO_WARNINGS: '1', FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString('utf8')).slice(-4_000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => {
      output += `\n(stopped after ${STAGE_TIMEOUT_MS / 1000} s)`;
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
    }, STAGE_TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ passed: code === 0, ms: performance.now() - started, tail: output });
    });
  });
}

/** The first line of a failure worth showing: a failing test's name, or a broken invariant. */
function firstFailure(tail: string): string {
  const line = tail
    .replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, 'g'), '') // colours
    .split('\n')
    .map((l) => l.trim())
    .find((l) => /^(FAIL|×|✗|first failure|AssertionError|Error:)/.test(l));
  return (line ?? tail.trim().split('\n').at(-1) ?? '').slice(0, 160);
}

const dir = scratch();
console.log(`mutants: scratch copy of ${values.head ? 'HEAD' : 'the working tree'} at ${dir}`);
const cleanup = () => {
  if (!values.keep) rmSync(dir, { recursive: true, force: true });
};

const started = performance.now();
console.log(`baseline: ${stages.map((s) => s.name).join(', ')} on the unmutated copy…`);
for (const stage of stages) {
  const result = await runStage(dir, stage);
  console.log(`  ${stage.name.padEnd(5)} ${result.passed ? 'passes' : 'FAILS'} (${(result.ms / 1000).toFixed(1)} s)`);
  if (!result.passed) {
    console.log(`\nThe unmutated copy fails "${stage.name}", so no mutant can be judged:\n${result.tail}`);
    cleanup();
    process.exit(2);
  }
}

interface Verdict {
  readonly mutant: Mutant;
  readonly status: 'killed' | 'survived' | 'stale';
  readonly by: string[];
  readonly detail: string;
  readonly ms: number;
}
const verdicts: Verdict[] = [];
for (const mutant of chosen) {
  const path = join(dir, mutant.file);
  const original = readFileSync(path, 'utf8');
  const n = applies(mutant, original);
  if (n !== 1) {
    verdicts.push({ mutant, status: 'stale', by: [], detail: n === 0 ? 'text not found' : `${n} matches`, ms: 0 });
    console.log(
      `${mutant.id.padEnd(3)} stale     ${mutant.what} (${n === 0 ? 'text not found' : `${n} matches`} in ${mutant.file})`,
    );
    continue;
  }
  writeFileSync(path, original.replace(mutant.find, mutant.replace));
  const by: string[] = [];
  let detail = '';
  let ms = 0;
  try {
    for (const stage of stages) {
      const result = await runStage(dir, stage);
      ms += result.ms;
      if (!result.passed) {
        by.push(stage.name);
        detail ||= firstFailure(result.tail);
        if (!values['all-stages']) break;
      }
    }
  } finally {
    writeFileSync(path, original);
  }
  const status = by.length > 0 ? 'killed' : 'survived';
  verdicts.push({ mutant, status, by, detail, ms });
  console.log(
    `${mutant.id.padEnd(3)} ${status.padEnd(9)} ${mutant.what}${by.length ? ` — by ${by.join(', ')}` : ''} (${(ms / 1000).toFixed(1)} s)` +
      (detail ? `\n      ${detail}` : ''),
  );
}

const killed = verdicts.filter((v) => v.status === 'killed').length;
const survived = verdicts.filter((v) => v.status === 'survived');
const stale = verdicts.filter((v) => v.status === 'stale');
const scored = killed + survived.length;
console.log(
  `\nmutation score: ${killed}/${scored} killed (${scored ? Math.round((100 * killed) / scored) : 0} %)` +
    `${stale.length ? `; ${stale.length} stale (${stale.map((v) => v.mutant.id).join(', ')}): update their text in scripts/mutants.ts` : ''}` +
    `; ${((performance.now() - started) / 1000).toFixed(0)} s`,
);
if (survived.length) console.log(`survivors: ${survived.map((v) => `${v.mutant.id} (${v.mutant.what})`).join('; ')}`);
cleanup();
