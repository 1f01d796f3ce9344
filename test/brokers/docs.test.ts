/**
 * docs/CONSUMERS.md shows the consumers the broker tests run. Each code block placed under a marker
 * `<!-- region: <file> <name> -->` must equal, byte for byte, the lines between `// #region <name>` and
 * `// #endregion <name>` in that file; the other code blocks are a fixed few (the first line of each is listed),
 * so a consumer cannot come back into the page unchecked. To change a consumer, edit the file (the broker tests
 * run it), then paste its region into the page.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { blocks, region as quote } from '../examples/regions.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const page = readFileSync(`${ROOT}docs/CONSUMERS.md`, 'utf8');

/** The checked blocks, in the page's order: the file the broker tests run, and the region in it. */
const REGIONS = [
  ['test/brokers/verdict.ts', 'verdict'],
  ['test/brokers/payouts.ts', 'payouts'],
  ['test/brokers/rabbitmq-consumer.ts', 'rabbitmq-consumer'],
  ['test/brokers/nats-setup.ts', 'nats-setup'],
  ['test/brokers/nats-consumer.ts', 'nats-consumer'],
] as const;

/** The first lines of the code blocks that are not consumers the tests run. */
const UNCHECKED = [
  "import { idempotent, IdempotentFailure, isIdempotencyError } from 'idem';",
  'receive → idempotent call → ack        (the call returned: first run or replay)',
  "import { createEngine, fingerprint } from 'idem';",
  "import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';",
];

const region = (file: string, name: string) => quote(ROOT, file, name);

describe('docs/CONSUMERS.md shows the consumers the broker tests run', () => {
  it('marks exactly the five regions, in order; every other block is one of the few unchecked ones', () => {
    const all = blocks(page);
    expect(all.filter((b) => b.marker !== undefined).map((b) => b.marker)).toEqual(
      REGIONS.map(([file, name]) => `${file} ${name}`),
    );
    expect(all.filter((b) => b.marker === undefined).map((b) => b.firstLine)).toEqual(UNCHECKED);
  });

  it.each(REGIONS)('the block marked %s %s is that region, byte for byte', (file, name) => {
    const block = blocks(page).find((b) => b.marker === `${file} ${name}`);
    expect(block?.code).toBe(region(file, name));
  });

  it('the blocks shown import one another as the tested files do, so the page is one program', () => {
    const imports = REGIONS.map(([file, name]) => [
      file.slice('test/brokers/'.length),
      [...region(file, name).matchAll(/from '(\.\/[^']+)'/g)].map((m) => m[1]),
    ]);
    expect(imports).toEqual([
      ['verdict.ts', []],
      ['payouts.ts', ['./bank.js', './verdict.js']],
      ['rabbitmq-consumer.ts', ['./payouts.js']],
      ['nats-setup.ts', []],
      ['nats-consumer.ts', ['./payouts.js']],
    ]);
  });
});
