/**
 * @module The same payload with its JSON keys reordered and re-spaced is the same request: replayed, not refused.
 */
import { difference, describe, sameAnswer } from '../answers.js';
import { effects, type CheckSpec } from '../context.js';
import { COUNT_HINT, TITLES, no, unjudged, unsaid, yes, type CheckResult } from '../model.js';
import { reorder } from '../payload.js';

export const keyOrder: CheckSpec = {
  ids: ['key-order'],
  run: async (context) => {
    const { first, key } = context;
    const reordered = reorder(context.body);
    if (reordered === undefined) {
      context.add(unjudged('key-order', 'skip', 'skipped: --body is not a JSON object or array'));
      return;
    }
    const run = await context.measured(() => context.send(key, reordered));
    const answer = run.value;
    const same = sameAnswer(first, answer) && !(run.delta !== null && run.delta > 0);
    const refused = answer.status === 400 || answer.status === 422;
    // The same answer without a count: replayed, or run again by an API that answers alike every time.
    const result: CheckResult = !same ? 'fail' : run.delta === null ? 'warn' : 'pass';
    context.add({
      id: 'key-order',
      title: TITLES['key-order'],
      result,
      ietf: unsaid('fingerprint is the server’s choice'),
      stripe: result === 'pass' ? yes() : result === 'warn' ? unsaid('not counted') : no('compares parameters'),
      observed: same
        ? `keys reordered and re-spaced: ${result === 'warn' ? 'the same answer' : 'replayed'} (${describe(answer)}, byte-identical)${effects(run.delta)}${result === 'warn' ? ` — not counted: it may have run again (${COUNT_HINT})` : ''}`
        : refused
          ? `keys reordered and re-spaced: refused as another payload (${describe(answer)}) — the fingerprint hashes raw bytes, so a client that re-serialises cannot retry${effects(run.delta)}`
          : `keys reordered and re-spaced: ${difference(first, answer)}${effects(run.delta)}`,
    });
  },
};
