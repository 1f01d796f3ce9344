/**
 * The store conformance suite (`describeStoreConformance`, unchanged) run inside workerd: the store in the Worker,
 * the records in SQLite-backed Durable Objects, on the Vitest shim the runtimes test uses (test/runtimes/).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storeConformanceCases } from '#test/runtimes/conformance-cases.js';
import type { CaseResult } from '#test/runtimes/vitest-shim.js';
import { startWorkerd, workerdBinary, type Workerd } from './workerd.test-kit.js';

const binary = workerdBinary();

describe.skipIf('error' in binary)('durable-objects store on workerd: conformance', () => {
  let workerd: Workerd;
  beforeAll(async () => {
    if ('path' in binary) workerd = await startWorkerd(binary.path);
  });
  afterAll(() => workerd?.stop());

  // 3 shards: a scope's keys spread over three objects, `list` merging them and `sweep` reaching each.
  it.each([1, 3])(
    'passes every case of the store conformance suite, %i shard(s) per scope',
    async (shards) => {
      const response = await fetch(`${workerd.base}/conformance?shards=${shards}`, {
        signal: AbortSignal.timeout(120_000),
      });
      const results = (await response.json()) as CaseResult[];
      const failed = results.filter((r) => r.status === 'failed').map((r) => `${r.name}: ${r.error ?? ''}`);
      expect(failed).toEqual([]);
      // Every case of the suite ran and passed, the response-size case too: this store declares maxResponseBytes.
      const prefix = 'store conformance: durable-objects > ';
      expect(results.map((r) => [r.name.replace(prefix, ''), r.status])).toEqual(
        storeConformanceCases().map((name) => [name, 'passed']),
      );
    },
    150_000,
  );
});
