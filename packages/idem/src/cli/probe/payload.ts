/**
 * @module The payloads the probe derives from `--body`: the tampered one for the reused-key check, and the same
 * JSON with its keys reordered for the key-order check.
 */
import { UsageError } from '../args.js';

/**
 * The payload for the reused-key check: the first number in `body` plus one, or else the first string with
 * `-tampered` appended. Throws a {@link UsageError} when `body` has neither.
 *
 * @example
 * tamper('{"amount":500,"currency":"usd"}') // → '{"amount":501,"currency":"usd"}'
 */
export function tamper(body: string): string {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw new UsageError('probe', `--body must be JSON, got ${JSON.stringify(body.slice(0, 80))}.`);
  }
  const change = (node: unknown, kind: 'number' | 'string'): { done: boolean; node: unknown } => {
    if (typeof node === kind)
      return { done: true, node: kind === 'number' ? (node as number) + 1 : `${node as string}-tampered` };
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const r = change(node[i], kind);
        if (r.done) return { done: true, node: node.map((v: unknown, j) => (j === i ? r.node : v)) };
      }
    } else if (node !== null && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        const r = change(v, kind);
        if (r.done) return { done: true, node: { ...node, [k]: r.node } };
      }
    }
    return { done: false, node };
  };
  for (const kind of ['number', 'string'] as const) {
    const r = change(value, kind);
    if (r.done) return JSON.stringify(r.node);
  }
  throw new UsageError('probe', '--body has no number or string to change: pass --tampered-body.');
}

/** The same JSON with every object's keys reversed and whitespace added; undefined when `body` is not an object or array. */
export function reorder(body: string): string | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (value === null || typeof value !== 'object') return undefined;
  const reverse = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(reverse);
    if (node !== null && typeof node === 'object') {
      return Object.fromEntries(
        Object.entries(node)
          .reverse()
          .map(([k, v]) => [k, reverse(v)]),
      );
    }
    return node;
  };
  return JSON.stringify(reverse(value), null, 1);
}
