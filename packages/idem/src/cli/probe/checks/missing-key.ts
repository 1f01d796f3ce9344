/**
 * @module No key: either refused (400: the route requires keys) or run unprotected (keys optional). Report which.
 */
import { describe } from '../answers.js';
import { effects, type CheckSpec } from '../context.js';
import { TITLES, unsaid, yes, type CheckResult } from '../model.js';

export const missingKey: CheckSpec = {
  ids: ['missing-key'],
  run: async (context) => {
    const run = await context.measured(() => context.send(null, context.body));
    const answer = run.value;
    const ran = answer.status >= 200 && answer.status < 300;
    const result: CheckResult = answer.status >= 500 ? 'fail' : ran || answer.status === 400 ? 'pass' : 'warn';
    context.add({
      id: 'missing-key',
      title: TITLES['missing-key'],
      result,
      ietf: answer.status === 400 ? yes('400: key required') : unsaid('silent when keys are optional'),
      stripe: ran ? yes('optional') : unsaid('Stripe runs it'),
      observed: ran
        ? `${describe(answer)}: ran without protection (keys are optional here)${effects(run.delta)}`
        : answer.status === 400
          ? `${describe(answer)}: refused — this route requires a key${effects(run.delta)}`
          : `${describe(answer)}${effects(run.delta)}`,
    });
  },
};
