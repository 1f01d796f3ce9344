/**
 * @module Shows raw engine values readably: JSON, except that multi-line strings (SQL, Lua) print as indented blocks.
 */

/**
 * Formats a JSON value as indented text. Strings with line breaks become `|` blocks with their common indent removed.
 *
 * @example
 * formatRaw({ sql: 'SELECT *\n  FROM t' }) // → 'sql: |\n  SELECT *\n    FROM t'
 */
export function formatRaw(value: unknown, indent = ''): string {
  if (value === null || typeof value !== 'object') return scalar(value, indent);
  const next = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    if (value.every((v) => v === null || typeof v !== 'object') && JSON.stringify(value).length < 80) return JSON.stringify(value);
    return value.map((v) => `\n${indent}- ${formatRaw(v, next).replace(/^\n\s*/, '')}`).join('');
  }
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return '{}';
  return entries.map(([k, v]) => `\n${indent}${k}: ${formatRaw(v, next)}`).join('');
}

function scalar(value: unknown, indent: string): string {
  if (typeof value !== 'string' || !value.includes('\n')) return JSON.stringify(value) ?? 'undefined';
  const lines = value.replace(/\s+$/, '').split('\n');
  const margins = lines.slice(1).filter((l) => l.trim()).map((l) => /^\s*/.exec(l)?.[0].length ?? 0);
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
