/**
 * @module How the probe compares answers and puts them in words: byte-identical or not, where they differ, the
 * status with its problem type, a tally of statuses. Every piece of server text here is made visible.
 */
import { visible } from '../escape.js';
import type { Answer } from './model.js';

export function sameAnswer(a: Answer, b: Answer): boolean {
  return a.status === b.status && Buffer.from(a.body).equals(Buffer.from(b.body));
}

export function difference(first: Answer, other: Answer): string {
  if (first.status !== other.status) return `${describe(other)} instead of ${first.status}`;
  const length = Math.min(first.body.byteLength, other.body.byteLength);
  let at = 0;
  while (at < length && first.body[at] === other.body[at]) at++;
  return `${other.status} with another body (${other.body.byteLength} bytes vs ${first.body.byteLength}; differs from byte ${at})`;
}

/** The status and, for an error, its machine-readable type (problem+json `type`, or Stripe's `error.type`/`code`). */
export function describe(answer: Answer): string {
  const type = answer.status >= 400 ? problemType(answer) : undefined;
  return type ? `${answer.status} ${type}` : String(answer.status);
}

export function problemType(answer: Answer): string | undefined {
  try {
    const parsed = JSON.parse(new TextDecoder().decode(answer.body)) as Record<string, unknown>;
    const error = parsed.error as Record<string, unknown> | undefined;
    const found = parsed.type ?? error?.code ?? error?.type ?? parsed.code;
    return typeof found === 'string' ? visible(found) : undefined;
  } catch {
    return undefined;
  }
}

export function tally(statuses: readonly number[]): string {
  const counts = new Map<number, number>();
  for (const s of statuses) counts.set(s, (counts.get(s) ?? 0) + 1);
  return (
    [...counts]
      .sort(([a], [b]) => a - b)
      .map(([s, n]) => `${n} × ${s}`)
      .join(', ') || 'no answers'
  );
}
