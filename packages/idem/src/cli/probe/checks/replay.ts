/**
 * @module A retry with the same key and payload replays the first answer, byte for byte, without running again;
 * and the replay is marked (Stripe's `Idempotent-Replayed: true`; the draft defines no marker).
 */
import { visible } from '../../escape.js';
import { difference, describe, sameAnswer } from '../answers.js';
import { effects, type CheckContext, type CheckSpec } from '../context.js';
import { COUNT_HINT, TITLES, no, unsaid, yes, type Answer, type CheckResult } from '../model.js';

export const replay: CheckSpec = {
  ids: ['replay', 'replay-marker'],
  run: async (context) => {
    const { first, key, body } = context;
    const run = await context.measured(() => context.send(key, body));
    const retry = run.value;
    const same = sameAnswer(first, retry);
    const ranAgain = run.delta !== null && run.delta > 0;
    // Byte-identical without a count: a replay, or the work run again by an API that answers alike every time.
    const result: CheckResult = !same || ranAgain ? 'fail' : run.delta === null ? 'warn' : 'pass';
    let observed = same
      ? `${describe(retry)}, ${retry.body.byteLength} bytes, byte-identical${effects(run.delta)}`
      : `${difference(first, retry)}${effects(run.delta)}`;
    if (ranAgain) observed += ' — the retry ran the work again';
    if (result === 'warn') observed += ` — not counted: it may have run again (${COUNT_HINT})`;
    if (context.wants('replay')) {
      context.add({
        id: 'replay',
        title: TITLES.replay,
        result,
        ietf: result === 'pass' ? yes() : result === 'warn' ? unsaid('not counted') : no('SHOULD replay'),
        stripe: result === 'pass' ? yes() : result === 'warn' ? unsaid('not counted') : no('replays'),
        observed,
      });
    }
    if (context.wants('replay-marker')) marker(context, retry);
  },
};

function marker(context: CheckContext, retry: Answer): void {
  const { first, replayHeader } = context;
  const onRetry = retry.headers.get(replayHeader);
  const onFirst = first.headers.get(replayHeader);
  const marked = context.isReplay(retry) && !context.isReplay(first);
  context.add({
    id: 'replay-marker',
    title: TITLES['replay-marker'],
    result: marked ? 'pass' : 'warn',
    ietf: unsaid('not in the draft'),
    stripe: marked ? yes() : no(`sends ${replayHeader}: true`),
    observed: marked
      ? `${replayHeader}: ${visible(onRetry ?? '')} on the replay, absent on the first answer`
      : onRetry === null
        ? `no ${replayHeader} header on the replay: a client cannot tell a replay from a fresh execution`
        : `${replayHeader}: ${visible(onRetry)} on the replay, ${onFirst === null ? 'absent' : `"${visible(onFirst)}"`} on the first answer`,
  });
}
