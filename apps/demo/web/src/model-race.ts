/**
 * @module The model page's race: two claims of one fresh key at once; which won, and the statement (and its
 * condition) that refused the other.
 */
import { postJson } from './api.js';
import { h } from './dom.js';
import type { Lit } from './model-machine.js';
import { running, showError, showOperation } from './model-show.js';
import type { Operation, Refusal } from './model-types.js';

interface Race {
  readonly key: string;
  readonly winners: number;
  readonly barrier: boolean;
  readonly claims: ReadonlyArray<
    Operation & {
      label: string;
      verdict: 'won' | 'lost' | 'error';
      refusedBy?: Refusal | null;
      /** PostgreSQL: the barrier's polls of pg_stat_activity on this claim's connection (not the claim's trips). */
      barrierPolls?: number;
    }
  >;
}

/**
 * Wires "Race two claims": runs `/v1/model/race`, shows both claims, and lights the winner's fresh claim.
 *
 * @example
 * raceSection(byId('race', HTMLButtonElement), byId('race-result', HTMLElement), machine.light)
 */
export function raceSection(button: HTMLButtonElement, target: HTMLElement, light: (lit: Lit) => void): void {
  button.addEventListener('click', () => {
    void running(button, async () => {
      try {
        const race = await postJson<Race>('/v1/model/race');
        const lost = race.claims.find((c) => c.verdict === 'lost');
        const how =
          lost?.refusedBy?.by === 'write'
            ? "refused by the write's own condition"
            : lost?.refusedBy?.by === 'read'
              ? 'turned away by its read'
              : lost?.refusedBy?.by === 'step'
                ? "refused inside the claim's one synchronous step"
                : 'refused';
        const parts: Node[] = [
          h(
            'p',
            { class: 'race-summary', 'data-testid': 'race-summary' },
            'Key ',
            h('code', {}, race.key),
            `: ${race.winners} winner; the other claim was ${how}.`,
            race.barrier ? ' Both had read the key as free before either wrote.' : '',
          ),
          // What refused the loser comes first, above both claims' round trips (on a phone, those run long).
          ...(lost?.refusedBy
            ? [
                h(
                  'p',
                  { class: 'callout refused-by', 'data-testid': 'refused-by' },
                  `Claim ${lost.label}: ${lost.refusedBy.text}`,
                ),
              ]
            : []),
          ...(lost?.refusedBy?.condition
            ? [
                h(
                  'div',
                  { class: 'refused-condition' },
                  h(
                    'p',
                    { class: 'label' },
                    lost.refusedBy.by === 'write'
                      ? 'the condition that refused the write'
                      : 'the read that answered first',
                  ),
                  h('pre', { class: 'sql' }, h('mark', {}, lost.refusedBy.condition)),
                ),
              ]
            : []),
          h(
            'div',
            { class: 'race-columns' },
            ...race.claims.map((claim) =>
              h(
                'div',
                { class: `race-claim ${claim.verdict}`, 'data-verdict': claim.verdict },
                h(
                  'p',
                  { class: 'race-label' },
                  `Claim ${claim.label}: `,
                  h(
                    'strong',
                    {},
                    claim.verdict === 'won' ? 'won' : claim.verdict === 'lost' ? `lost: ${how}` : 'error',
                  ),
                ),
                showOperation(claim, undefined, claim.refusedBy ?? null),
                claim.barrierPolls
                  ? h(
                      'p',
                      { class: 'small muted', 'data-testid': 'barrier-polls' },
                      `Not counted above: the page's barrier polled pg_stat_activity ${claim.barrierPolls === 1 ? 'once' : `${claim.barrierPolls} times`} on this connection until the other claim waited on this row. Those polls are the demonstration's, not the claim's.`,
                    )
                  : null,
              ),
            ),
          ),
        ];
        target.replaceChildren(...parts);
        const won = race.claims.find((c) => c.verdict === 'won');
        if (won?.reading)
          light({ operation: `Race two claims (claim ${won.label} won)`, key: race.key, reading: won.reading });
      } catch (error) {
        showError(target, error);
      }
    });
  });
}
