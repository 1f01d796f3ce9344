/**
 * @module The one terminal-safe escaper of the `idem` command: every string that came from a store or a server
 * (keys, scopes, ids, header names and values, bodies, problem types, error text) goes through it before it is
 * printed, in tables and in `--json` alike, so stored or remote text cannot act on the operator's terminal.
 */

/**
 * What a terminal may act on or a reader cannot see, but for C0 controls and the backslash: DEL and C1 controls
 * (U+0080–U+009F, CSI among them); every format character (`Cf`: bidi overrides and isolates, zero-width
 * characters, U+00AD, U+061C, U+180E, U+FFF9–U+FFFB, tag characters…), line and paragraph separators (`Zl`, `Zp`);
 * every default-ignorable code point (U+034F, the Hangul fillers U+115F, U+1160, U+3164, U+FFA0, variation
 * selectors, U+E0000–U+E0FFF); U+2800, the blank braille pattern; and lone surrogates. The explicit list repeats
 * what the classes hold today, so an older Unicode table in the runtime cannot let one through.
 */
const INVISIBLE = String.raw`\x7f-\x9f\p{Cf}\p{Zl}\p{Zp}\p{Cs}\p{Default_Ignorable_Code_Point}\u00ad\u061c\u115f\u1160\u180e\u2800\u3164\uffa0\ufff9-\ufffb\u{e0000}-\u{e007f}`;
/** U+034F, the combining grapheme joiner: outside the class, where a combining mark is not misleading. */
const COMBINING = String.raw`\u034f`;
/** {@link INVISIBLE}, the C0 controls (ESC, CR, LF, BEL, tab…) and the backslash. */
const UNSAFE = new RegExp(String.raw`[\x00-\x1f\\${INVISIBLE}]|${COMBINING}`, 'gu');
const UNSAFE_IN_JSON = new RegExp(`[${INVISIBLE}]|${COMBINING}`, 'gu');

export interface VisibleOptions {
  /**
   * Escape the backslash too (default), so a literal `\x1b` in the text cannot pass for an escaped ESC. False for
   * text made visible already, which a second pass must not double-escape.
   */
  readonly backslash?: boolean;
  /** Keep line feeds (for a multi-line body printed as a block of its own); default false. */
  readonly newlines?: boolean;
}

/**
 * `text` with every character a terminal may act on or a reader cannot see written visibly: `\xHH` up to U+00FF,
 * `\uHHHH` in the BMP, `\u{HHHHH}` above it, the backslash as `\\`. A stored `ESC]0;title BEL ESC[2J` then cannot set the window title
 * or clear the screen, CR cannot overwrite a line, U+202E cannot reverse what follows, and a zero-width or tag
 * character cannot make two different keys look the same. Other text (é, —, ✓, U+00A0) is left alone.
 *
 * @example
 * visible('urn:x\x1b[2J\rOK\u202e') // → 'urn:x\\x1b[2J\\x0dOK\\u202e' (printed: urn:x\x1b[2J\x0dOK\u202e)
 */
export function visible(text: string, { backslash = true, newlines = false }: VisibleOptions = {}): string {
  return text.replace(UNSAFE, (char) =>
    (char === '\\' && !backslash) || (char === '\n' && newlines) ? char : escapeChar(char),
  );
}

/**
 * `JSON.stringify(value, null, space)` with nothing a terminal acts on: `JSON.stringify` escapes C0 controls and
 * lone surrogates in strings, and leaves DEL, C1 and the invisible characters of {@link visible} raw; they are
 * written here as `\uXXXX` (a surrogate pair for a character above the BMP). The text stays valid JSON and
 * parses back to the same value.
 *
 * @example
 * safeJson({ key: 'k\u009b2J' }) // → '{"key":"k\\u009b2J"}'
 */
export function safeJson(value: unknown, space?: number): string {
  // Outside strings JSON holds nothing from U+007F up, so every character found is inside a string, where \uXXXX is valid.
  return JSON.stringify(value, null, space).replace(UNSAFE_IN_JSON, (char) =>
    Array.from({ length: char.length }, (_, i) => `\\u${hex(char.charCodeAt(i), 4)}`).join(''),
  );
}

function escapeChar(char: string): string {
  if (char === '\\') return '\\\\';
  const code = char.codePointAt(0) as number;
  return code <= 0xff ? `\\x${hex(code, 2)}` : code <= 0xffff ? `\\u${hex(code, 4)}` : `\\u{${hex(code, 1)}}`;
}

function hex(code: number, width: number): string {
  return code.toString(16).padStart(width, '0');
}
