/**
 * @module Formatting for figures: dollars, durations, times, abbreviations.
 */

const USD = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });

/**
 * Cents as dollars.
 *
 * @example
 * dollars(100000) // → '$1,000.00'
 */
export const dollars = (cents: number): string => USD.format(cents / 100);

/**
 * A long value cut in the middle.
 *
 * @example
 * abbreviate('9f86d081884c7d659a2feaa0c55ad015', 6) // → '9f86d0…d015'
 */
export function abbreviate(value: string, head = 8, tail = 4): string {
  return value.length <= head + tail + 1 ? value : `${value.slice(0, head)}…${value.slice(-tail)}`;
}

/**
 * How far `at` (epoch ms) is from `now`, in words.
 *
 * @example
 * relative(Date.now() + 86_400_000) // → 'in 24 h'
 */
export function relative(at: number, now = Date.now()): string {
  const ms = at - now;
  const abs = Math.abs(ms);
  const text =
    abs < 1_000
      ? `${abs} ms`
      : abs < 60_000
        ? `${(abs / 1_000).toFixed(1)} s`
        : abs < 3_600_000
          ? `${Math.round(abs / 60_000)} min`
          : `${Math.round(abs / 3_600_000)} h`;
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

/**
 * An epoch-ms time as a local clock time with milliseconds.
 *
 * @example
 * clock(Date.now()) // → '14:03:07.120'
 */
export function clock(at: number): string {
  const d = new Date(at);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/**
 * A count and its noun, singular or plural.
 *
 * @example
 * plural(2, 'charge') // → '2 charges'
 */
export const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;
