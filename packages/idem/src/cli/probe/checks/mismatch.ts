/**
 * @module The same key with another payload is refused (400 Stripe, 422 draft), runs nothing, replays nothing.
 */
import { randomUUID } from 'node:crypto';
import { describe, sameAnswer } from '../answers.js';
import { effects, type CheckSpec } from '../context.js';
import { TITLES, no, yes, type CheckResult } from '../model.js';

export const mismatch: CheckSpec = {
  ids: ['mismatch'],
  run: async (context) => {
    const { first, key, tamperedBody } = context;
    const run = await context.measured(() => context.send(key, tamperedBody));
    const answer = run.value;
    const refused = answer.status === 400 || answer.status === 422;
    const ranAgain = run.delta !== null && run.delta > 0;
    let result: CheckResult;
    let observed: string;
    if (answer.status >= 200 && answer.status < 300) {
      result = 'fail';
      observed = sameAnswer(first, answer)
        ? `${describe(answer)}: replayed the first answer to another payload instead of refusing it (the fingerprint is not checked)`
        : `${describe(answer)}: ran the other payload under the same key`;
      observed += effects(run.delta);
    } else if (refused && !ranAgain) {
      // Control: is the tampered payload acceptable on its own? Otherwise the refusal may be validation, not the key.
      const control = await context.measured(() => context.send(randomUUID(), tamperedBody));
      const valid = control.value.status >= 200 && control.value.status < 300;
      result = valid ? 'pass' : 'warn';
      observed = `${describe(answer)}${effects(run.delta)}; control: the same payload with a fresh key → ${control.value.status}`;
      if (!valid)
        observed += ' — the refusal may be validation, not the key (pass --tampered-body with a valid payload)';
    } else {
      result = answer.status >= 500 || ranAgain ? 'fail' : 'warn';
      observed = `${describe(answer)}${effects(run.delta)}${ranAgain ? ' — the work ran again' : ''}`;
    }
    const ok = result !== 'fail' && refused;
    context.add({
      id: 'mismatch',
      title: TITLES.mismatch,
      result,
      ietf: ok && answer.status === 422 ? yes('422') : no('wants 422'),
      stripe: ok && answer.status === 400 ? yes('400') : no('wants 400'),
      observed,
    });
  },
};
