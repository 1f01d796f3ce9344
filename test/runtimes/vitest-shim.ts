/**
 * @module The part of Vitest's API that `idem/testing` calls (`describe`, `it`, `beforeEach`, `afterEach`,
 * `expect`), small enough to run on any runtime. The runtimes test bundles `src/testing/index.ts` with `vitest`
 * aliased to this file, so Bun, Deno and other Node versions run the very cases `describeStoreConformance` holds,
 * with Vitest's own matchers (`@vitest/expect` on chai), not a rewrite of them.
 */
import * as chai from 'chai';
import {
  GLOBAL_EXPECT,
  JestAsymmetricMatchers,
  JestChaiExpect,
  JestExtend,
  setState,
  type ExpectStatic,
} from '@vitest/expect';

chai.use(JestExtend);
chai.use(JestChaiExpect);
chai.use(JestAsymmetricMatchers);

/** `expect` as Vitest builds it: chai's, with the Jest matchers and a state object they read. */
export const expect = Object.assign(
  (value: unknown, message?: string) => chai.expect(value, message),
  chai.expect,
) as unknown as ExpectStatic;
setState(
  {
    assertionCalls: 0,
    isExpectingAssertions: false,
    isExpectingAssertionsError: null,
    expectedAssertionsNumber: null,
    expectedAssertionsNumberErrorGen: null,
  },
  expect,
);
(globalThis as Record<symbol, unknown>)[GLOBAL_EXPECT] = expect;

type Hook = () => unknown;
interface TestContext {
  skip(reason?: string): never;
}
interface Case {
  readonly name: string;
  readonly fn: (context: TestContext) => unknown;
  /** The enclosing blocks, outermost first: their hooks are read when the case runs. */
  readonly blocks: readonly Block[];
}
interface Block {
  readonly name: string;
  readonly before: Hook[];
  readonly after: Hook[];
}

/** One case's result, as the runtimes test asserts it. */
export interface CaseResult {
  readonly name: string;
  readonly status: 'passed' | 'failed' | 'skipped';
  readonly ms: number;
  readonly error?: string;
}

const cases: Case[] = [];
const stack: Block[] = [];

class Skip extends Error {}

export function describe(name: string, body: () => void): void {
  stack.push({ name, before: [], after: [] });
  try {
    body();
  } finally {
    stack.pop();
  }
}

export function it(name: string, fn: (context: TestContext) => unknown): void {
  cases.push({
    name: [...stack.map((b) => b.name), name].join(' > '),
    fn,
    blocks: [...stack],
  });
}
export const test = it;

export function beforeEach(hook: Hook): void {
  current('beforeEach').before.push(hook);
}

export function afterEach(hook: Hook): void {
  current('afterEach').after.push(hook);
}

function current(hook: string): Block {
  const block = stack.at(-1);
  if (!block) throw new Error(`${hook} outside describe is not supported by the runtimes shim`);
  return block;
}

/** Runs one case with a bound on its time, as Vitest's `testTimeout` does. */
async function within<T>(ms: number, what: string, work: () => Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs every registered case in order (hooks around each, after-hooks even when the case fails). */
export async function run({ timeoutMs = 30_000 }: { timeoutMs?: number } = {}): Promise<CaseResult[]> {
  const results: CaseResult[] = [];
  const context: TestContext = {
    skip: (reason) => {
      throw new Skip(reason ?? 'skipped');
    },
  };
  for (const c of cases.splice(0)) {
    const started = performance.now();
    let status: CaseResult['status'] = 'passed';
    let error: string | undefined;
    try {
      await within(timeoutMs, c.name, async () => {
        try {
          for (const block of c.blocks) for (const hook of block.before) await hook();
          await c.fn(context);
        } finally {
          for (const block of [...c.blocks].reverse()) for (const hook of block.after) await hook();
        }
      });
    } catch (thrown) {
      if (thrown instanceof Skip) status = 'skipped';
      else {
        status = 'failed';
        error = thrown instanceof Error ? `${thrown.message}\n${thrown.stack ?? ''}`.slice(0, 2_000) : String(thrown);
      }
    }
    const ms = Math.round(performance.now() - started);
    results.push(error === undefined ? { name: c.name, status, ms } : { name: c.name, status, ms, error });
  }
  return results;
}
