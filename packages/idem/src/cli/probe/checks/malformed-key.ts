/**
 * @module Malformed keys: empty, and longer than the 255 characters Stripe allows. Refusing is right; accepting
 * one is a warning; a 5xx fails.
 */
import { describe } from '../answers.js';
import { effects, type CheckSpec } from '../context.js';
import { TITLES, no, unsaid, yes, type CheckResult } from '../model.js';

export const malformedKey: CheckSpec = {
  ids: ['malformed-key'],
  run: async (context) => {
    const cases: Array<[string, string]> = [
      ['empty', ''],
      ['300 chars', 'k'.repeat(300)],
    ];
    const seen: string[] = [];
    let result: CheckResult = 'pass';
    let longRefused = false;
    let total: number | null = 0;
    for (const [label, key] of cases) {
      const run = await context.measured(() => context.send(null, context.body, [[context.keyHeader, key]]));
      const answer = run.value;
      total = total === null || run.delta === null ? null : total + run.delta;
      seen.push(`${label} → ${describe(answer)}`);
      if (answer.status >= 500) result = 'fail';
      else if (answer.status < 400 && result !== 'fail') result = 'warn';
      if (label === '300 chars') longRefused = answer.status === 400;
    }
    context.add({
      id: 'malformed-key',
      title: TITLES['malformed-key'],
      result,
      ietf: unsaid('not specified'),
      stripe: longRefused ? yes('≤ 255 chars') : no('refuses > 255 chars'),
      observed: seen.join('; ') + effects(total) + (result === 'warn' ? ' — accepted a malformed key' : ''),
    });
  },
};
