/**
 * @module A retry with the same key and payload replays the first answer, byte for byte, without running again;
 * and the replay is marked (Stripe's `Idempotent-Replayed: true`; the draft defines no marker).
 */
import { visible } from '../../escape.js';
import { difference, describe, sameAnswer } from '../answers.js';
import { effects, type CheckContext, type CheckSpec } from '../context.js';
import { TITLES, no, unsaid, yes, type Answer } from '../model.js';

export const replay: CheckSpec = {
  ids: ['replay', 'replay-marker'],
  run: async (context) => {
    const { first, key, body } = context;
    const run = await context.measured(() => context.send(key, body));
    const retry = run.value;
    const same = sameAnswer(first, retry);
    const ranAgain = run.delta !== null && run.delta > 0;
    const ok = same && !ranAgain;
    const observed = same
      ? `${describe(retry)}, ${retry.body.byteLength} bytes, byte-identical${effects(run.delta)}`
      : `${difference(first, retry)}${effects(run.delta)}`;
    if (context.wants('replay')) {
      context.add({
        id: 'replay',
        title: TITLES.replay,
        result: ok ? 'pass' : 'fail',
        ietf: ok ? yes() : no('SHOULD replay'),
        stripe: ok ? yes() : no('replays'),
        observed: ranAgain ? `${observed} — the retry ran the work again` : observed,
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
