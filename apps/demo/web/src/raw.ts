/**
 * @module Shows raw engine values readably: JSON, except that multi-line strings (SQL, Lua) print as indented blocks
 * and times carry a readable form beside the raw number.
 */
import { clock, relative } from './format.js';

/** Keys whose numbers are times: `claimedAt`, `expires_at`, `expiresAtMs`, `now`, `leaseExpiresAt`. */
const TIME_KEY = /^(now|.*At|.*_at|.*AtMs)$/;

/**
 * A time value read as a person would: epoch ms (or epoch seconds, DynamoDB's TTL attribute) as a local clock time
 * and how far from now. Null when the value does not look like a time.
 *
 * @example
 * readableTime(Date.now() + 10_000) // → '14:03:17.120, in 10.0 s'
 */
export function readableTime(value: unknown, now = Date.now()): string | null {
  const n = typeof value === 'number' ? value : typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : NaN;
  const ms = n >= 1e12 && n < 1e14 ? n : n >= 1e9 && n < 1e11 ? n * 1_000 : NaN;
  if (!Number.isFinite(ms)) return null;
  return `${clock(ms)}, ${relative(ms, now)}${ms === n ? '' : ' (epoch seconds)'}`;
}

/**
 * Formats a JSON value as indented text. Strings with line breaks become `|` blocks with their common indent removed.
 * A time (by its key, e.g. `expiresAt`, or DynamoDB's `{ N }` under such a key) gets its readable form beside it.
 *
 * @example
 * formatRaw({ sql: 'SELECT *\n  FROM t' }) // → 'sql: |\n  SELECT *\n    FROM t'
 */
export function formatRaw(value: unknown, indent = '', time = false): string {
  if (value === null || typeof value !== 'object') return scalar(value, indent, time);
  const next = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    if (value.every((v) => v === null || typeof v !== 'object') && JSON.stringify(value).length < 80)
      return JSON.stringify(value);
    return value.map((v) => `\n${indent}- ${formatRaw(v, next).replace(/^\n\s*/, '')}`).join('');
  }
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return '{}';
  return entries
    .map(([k, v]) => `\n${indent}${k}: ${formatRaw(v, next, TIME_KEY.test(k) || (time && k === 'N'))}`)
    .join('');
}

function scalar(value: unknown, indent: string, time: boolean): string {
  const readable = time ? readableTime(value) : null;
  if (readable) return `${JSON.stringify(value)}  # ${readable}`;
  if (typeof value !== 'string' || !value.includes('\n')) return JSON.stringify(value) ?? 'undefined';
  const lines = value.replace(/\s+$/, '').split('\n');
  const margins = lines
    .slice(1)
    .filter((l) => l.trim())
    .map((l) => /^\s*/.exec(l)?.[0].length ?? 0);
  const cut = margins.length ? Math.min(...margins) : 0;
  return `|${lines.map((l, i) => `\n${indent}${i === 0 ? l.trim() : l.slice(cut)}`).join('')}`;
}

/**
 * Formats a whole value (no leading newline).
 *
 * @example
 * pre.textContent = raw(trip.request)
 */
export const raw = (value: unknown): string => formatRaw(value).replace(/^\n/, '');
