/**
 * @module The same payload with its JSON keys reordered and re-spaced is the same request: replayed, not refused.
 */
import { difference, describe, sameAnswer } from '../answers.js';
import { effects, type CheckSpec } from '../context.js';
import { TITLES, no, unjudged, unsaid, yes } from '../model.js';
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
    context.add({
      id: 'key-order',
      title: TITLES['key-order'],
      result: same ? 'pass' : 'fail',
      ietf: unsaid('fingerprint is the server’s choice'),
      stripe: same ? yes() : no('compares parameters'),
      observed: same
        ? `keys reordered and re-spaced: replayed (${describe(answer)}, byte-identical)${effects(run.delta)}`
        : refused
          ? `keys reordered and re-spaced: refused as another payload (${describe(answer)}) — the fingerprint hashes raw bytes, so a client that re-serialises cannot retry${effects(run.delta)}`
          : `keys reordered and re-spaced: ${difference(first, answer)}${effects(run.delta)}`,
    });
  },
};
