/**
 * @module The probe's report, printed: a table for people, or JSON for CI. Either way nothing in it can act on
 * the terminal.
 */
import { table } from '../args.js';
import { safeJson, visible } from '../escape.js';
import { COUNT_HINT, type ProbeReport, type ProfileVerdict } from './model.js';

/**
 * The report as a table for people: one row per check, the two profiles' verdicts beside the result.
 *
 * @example
 * io.stdout(formatReport(await probe(options)))
 */
export function formatReport(report: ProbeReport): string {
  const mark = (v: ProfileVerdict): string =>
    v.ok === null ? '·' : `${v.ok ? '✓' : '✗'}${v.note ? ` ${v.note}` : ''}`;
  // Server text is made visible where it enters `observed`; every cell is escaped again here, whatever its origin,
  // but for the backslash (a second pass must not double the first one's escapes).
  const rows = report.checks.map((c) =>
    [c.title, c.result.toUpperCase(), mark(c.ietf), mark(c.stripe), c.observed].map((cell) =>
      visible(cell, { backslash: false }),
    ),
  );
  const { pass, warn, fail, skip } = report.summary;
  return [
    `idem probe: ${visible(report.method)} ${visible(report.url)}`,
    `payload ${visible(report.body)} · tampered ${visible(report.tamperedBody)} · ${report.concurrency} concurrent · side effects ${report.sideEffects === 'counted' ? 'counted by --count-url' : `not counted: a check that needs a count warns (${COUNT_HINT})`}`,
    '',
    table([['CHECK', 'RESULT', 'IETF DRAFT', 'STRIPE', 'OBSERVED'], ...rows]).trimEnd(),
    '',
    `${report.checks.length} checks: ${pass} pass, ${warn} warn, ${fail} fail, ${skip} skip — ${report.ok ? 'OK' : 'FAILED'}`,
    'IETF DRAFT = draft-ietf-httpapi-idempotency-key-header; STRIPE = Stripe’s documented behaviour. ✓ matches, ✗ differs, · not specified.',
    '',
  ].join('\n');
}

/**
 * The report as JSON (2-space indent, a final newline) with no character a terminal acts on (see `safeJson`).
 * The text parses to the same report.
 *
 * @example
 * io.stdout(formatJson(await probe(options)))
 */
export function formatJson(report: ProbeReport): string {
  return `${safeJson(report, 2)}\n`;
}
