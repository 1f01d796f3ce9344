/**
 * @module A JSON number in canonical form, `<digits>e<exponent>`: `digits` without leading or trailing zeros, the
 * exponent moved to match (`1.50` → `15e-1`, `100` → `1e2`, `-0.0` → `0`). Exact at any length: no double, no
 * BigInt; one pass over the bytes, so a number's cost is its length, whatever its digits.
 */

/** Thrown for a body that is not canonicalised (not JSON, not UTF-8, too deep, a number too long). */
export const REFUSED = new SyntaxError('not canonical JSON');

/** Longer numbers were never canonicalised (the body is hashed raw); kept so stored fingerprints still match. */
const MAX_NUMBER_LENGTH = 4096;

/** The most bytes `writeNumber` writes: a number's 4096 characters, and a sign, an `e` and a carry more. */
export const MAX_NUMBER_OUTPUT = MAX_NUMBER_LENGTH + 24;

let end = 0;

/** Where the number last written by `writeNumber` ended in the body. */
export function numberEnd(): number {
  return end;
}

/**
 * Writes the canonical form of the JSON number at `b[start]` to `out` at `at` (room for `MAX_NUMBER_OUTPUT` bytes)
 * and returns where the output ends; `numberEnd()` then tells where the number ended. A fraction or an exponent
 * counts only when complete (`1.` and `1e+` end the number before the `.` or `e`, which the caller then refuses).
 *
 * @example
 * writeNumber(utf8('[1.50]'), 1, out, 0) // → 5, out starts with `15e-1`, numberEnd() → 5
 */
export function writeNumber(b: Uint8Array, start: number, out: Uint8Array, at: number): number {
  let i = start;
  const negative = b[i] === 0x2d; // -
  if (negative) i++;
  // The integer part: `0`, or a non-zero digit and any digits (a second leading zero ends the number there).
  const intStart = i;
  const lead = b[i];
  if (lead === 0x30) i++;
  else if (lead !== undefined && lead >= 0x31 && lead <= 0x39) i = skipDigits(b, i + 1);
  else throw REFUSED;
  const intEnd = i;
  // The first digit that is not zero: the lead, or after `0.` the first past the fraction's zeros (-1: none).
  let first = lead === 0x30 ? -1 : intStart;
  let fracEnd = i;
  if (b[i] === 0x2e && isDigit(b[i + 1])) {
    let k = i + 1;
    if (first === -1) {
      while (b[k] === 0x30) k++;
      if (isDigit(b[k])) first = k;
    }
    i = fracEnd = skipDigits(b, k);
  }
  let expStart = -1;
  const e = b[i];
  if (e === 0x65 || e === 0x45) {
    const sign = b[i + 1];
    const first = sign === 0x2b || sign === 0x2d ? i + 2 : i + 1;
    if (isDigit(b[first])) {
      expStart = i + 1;
      i = skipDigits(b, first + 1);
    }
  }
  if (i - start > MAX_NUMBER_LENGTH) throw REFUSED;
  end = i;
  // The usual case, an integer that ends in 1–9, is already canonical but for its exponent.
  if (expStart === -1 && fracEnd === intEnd && b[i - 1] !== 0x30) {
    at = copy(b, start, i, out, at);
    out[at++] = 0x65;
    out[at++] = 0x30;
    return at;
  }
  if (first === -1) {
    out[at++] = 0x30; // zero: `0`, without sign or exponent
    return at;
  }
  // The digits are b[intStart, intEnd) and b[intEnd + 1, fracEnd) (after the `.`): the last that is not zero,
  // and how many zeros trail.
  const fracLength = fracEnd === intEnd ? 0 : fracEnd - intEnd - 1;
  let last = fracLength === 0 ? intEnd : fracEnd;
  let trailing = 0;
  for (let c = b[last - 1]; c === 0x30 || c === 0x2e; c = b[--last - 1]) if (c === 0x30) trailing++;
  if (negative) out[at++] = 0x2d;
  // The digits from the first to the last that is not zero, without the `.`
  if (first < intEnd) at = copy(b, first, Math.min(last, intEnd), out, at);
  if (last > intEnd) at = copy(b, Math.max(first, intEnd + 1), last, out, at);
  out[at++] = 0x65;
  const shift = trailing - fracLength;
  return expStart === -1 ? writeInteger(out, at, shift) : writeExponent(b, expStart, i, shift, out, at);
}

/** Copies `b[from, to)` to `out` at `at`; returns where it ends. */
function copy(b: Uint8Array, from: number, to: number, out: Uint8Array, at: number): number {
  if (to - from > 32) {
    out.set(b.subarray(from, to), at);
    return at + to - from;
  }
  for (let k = from; k < to; k++) out[at++] = b[k] as number;
  return at;
}

function isDigit(code: number | undefined): boolean {
  return code !== undefined && code >= 0x30 && code <= 0x39;
}

/** The index of the first non-digit at or after `at`. */
function skipDigits(b: Uint8Array, at: number): number {
  while (isDigit(b[at])) at++;
  return at;
}

/** A safe integer in decimal. */
function writeInteger(out: Uint8Array, at: number, value: number): number {
  if (value >= 0 && value < 10) {
    out[at] = 0x30 + value;
    return at + 1;
  }
  if (value < 0) {
    out[at++] = 0x2d;
    value = -value;
  }
  let digits = 1;
  for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++;
  const end = at + digits;
  let k = end;
  do {
    out[--k] = 0x30 + (value % 10);
    value = Math.floor(value / 10);
  } while (value > 0);
  return end;
}

/**
 * `exp + shift` in decimal, exactly, where `exp` is the JSON exponent `b[from, to)` (`[+-]?\d+`, any length) and
 * `shift` a small integer (|shift| ≤ 4096). A short exponent is a double's exact integer; a long one (|exp| ≥
 * 10^15 ≫ |shift|) keeps its sign, and its magnitude moves by |shift| in its last digits with a carry or a borrow.
 */
function writeExponent(b: Uint8Array, from: number, to: number, shift: number, out: Uint8Array, at: number): number {
  let i = from;
  const negative = b[i] === 0x2d;
  if (negative || b[i] === 0x2b) i++;
  while (i < to - 1 && b[i] === 0x30) i++; // leading zeros, keeping one digit
  if (to - i <= 15) {
    let magnitude = 0;
    for (let k = i; k < to; k++) magnitude = magnitude * 10 + ((b[k] as number) - 0x30);
    return writeInteger(out, at, (negative ? -magnitude : magnitude) + shift);
  }
  if (negative) out[at++] = 0x2d;
  const spare = at; // one digit more, for a carry
  out[at++] = 0x30;
  at = copy(b, i, to, out, at);
  let step = negative ? -shift : shift;
  if (step > 0) {
    for (let k = at - 1; step > 0; k--) {
      const digit = (out[k] as number) - 0x30 + step;
      out[k] = 0x30 + (digit % 10);
      step = Math.floor(digit / 10);
    }
  } else {
    let borrow = -step;
    for (let k = at - 1; borrow > 0; k--) {
      let digit = (out[k] as number) - 0x30 - (borrow % 10);
      borrow = Math.floor(borrow / 10);
      if (digit < 0) {
        digit += 10;
        borrow++;
      }
      out[k] = 0x30 + digit;
    }
  }
  let lead = spare;
  while (lead < at - 1 && out[lead] === 0x30) lead++;
  if (lead === spare) return at;
  out.copyWithin(spare, lead, at);
  return at - (lead - spare);
}
