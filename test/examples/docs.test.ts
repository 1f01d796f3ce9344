/**
 * The README and docs/ quote the examples (examples/*) instead of carrying their own copies: each code block
 * under a marker `<!-- region: examples/<file> <name> -->` must equal that region of the file byte for byte
 * (regions.ts), and every region an example marks is quoted exactly once, so a quote cannot be dropped for a
 * hand-written copy unnoticed. The example tests (test/examples/*.test.ts) run the files themselves.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './kit.js';
import { blocks, region, regionNames } from './regions.js';

const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** Every marker that quotes an example, as `<page>: <file> <name>`. */
const quoted = PAGES.flatMap((page) =>
  blocks(readFileSync(join(ROOT, page), 'utf8'))
    .filter((b) => b.marker?.startsWith('examples/'))
    .map((b) => ({ page, marker: b.marker ?? '', code: b.code })),
);

/** The quotes in the package's README, which repeats the quick start for the registry. */
const packageQuotes = blocks(readFileSync(join(ROOT, 'packages/idem/README.md'), 'utf8'))
  .filter((b) => b.marker?.startsWith('examples/'))
  .map((b) => ({ page: 'packages/idem/README.md', marker: b.marker ?? '', code: b.code }));

/** Every region the examples mark, as `<file> <name>`. */
const marked = readdirSync(join(ROOT, 'examples'), { recursive: true, encoding: 'utf8' })
  .filter((file) => /\.(c|m)?(j|t)sx?$/.test(file) && !file.split(/[/\\]/).includes('node_modules'))
  .flatMap((file) =>
    regionNames(readFileSync(join(ROOT, 'examples', file), 'utf8')).map((name) => `examples/${file} ${name}`),
  );

describe('the docs quote the examples', () => {
  it('every region the examples mark is quoted exactly once', () => {
    expect(quoted.map((q) => q.marker).sort()).toEqual([...marked].sort());
  });

  it("the package's README quotes the quick start: the handler and the four runtimes", () => {
    expect(packageQuotes.map((q) => q.marker)).toEqual([
      'examples/web/charges.js handler',
      'examples/web/node.js node',
      'examples/web/bun.js bun',
      'examples/web/deno.js deno',
      'examples/web/worker.js worker',
    ]);
  });

  // The package's own README (the registry page) quotes some of them again, byte for byte too.
  it.each([...quoted, ...packageQuotes])(
    '$page: the block marked $marker is that region, byte for byte',
    ({ marker, code }) => {
      const [file = '', name = ''] = marker.split(' ');
      expect(code).toBe(region(ROOT, file, name));
    },
  );
});
