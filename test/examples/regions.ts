/**
 * @module Code the docs quote from tested files. A Markdown code block placed under a marker
 * `<!-- region: <file> <name> -->` must equal, byte for byte, the lines between `// #region <name>` and
 * `// #endregion <name>` in that file (a path from the repository's root).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Block {
  /** `<file> <name>` from the marker on the line before the fence, if any. */
  readonly marker: string | undefined;
  readonly firstLine: string;
  readonly code: string;
}

/** Every fenced block of a page, with the region marker on the line before its fence, if any. */
export function blocks(markdown: string): Block[] {
  const found: Block[] = [];
  for (const m of markdown.matchAll(/(?:<!-- region: ([^\n]+) -->\n)?```[a-z]*\n([\s\S]*?)^```$/gm)) {
    const code = m[2] ?? '';
    found.push({ marker: m[1], firstLine: code.split('\n', 1)[0] ?? '', code });
  }
  return found;
}

/** The lines of `file` between `// #region <name>` and `// #endregion <name>`; throws unless there is one such. */
export function region(root: string, file: string, name: string): string {
  const text = readFileSync(join(root, file), 'utf8');
  const [start, end] = [`// #region ${name}\n`, `// #endregion ${name}\n`];
  const from = text.indexOf(start);
  const to = text.indexOf(end);
  if (from < 0 || to < from || text.indexOf(start, from + 1) >= 0) throw new Error(`${file}: no single region ${name}`);
  return text.slice(from + start.length, to);
}

/** The names of the regions a file marks, in order. */
export const regionNames = (text: string): string[] =>
  [...text.matchAll(/^\/\/ #region (\S+)$/gm)].map((m) => m[1] ?? '');
