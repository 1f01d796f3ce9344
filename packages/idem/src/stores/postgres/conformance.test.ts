/** The PostgreSQL store against the shared conformance suite, each case on a schema of its own. */
import { describe } from 'vitest';
import { describeStoreConformance } from 'idem/testing';
import { available, isolated } from '#test/fixtures/postgres.js';
import { closingWith } from '../../testing/fixtures.js';

describe.skipIf(!available)('postgres store', () => {
  describeStoreConformance({
    name: 'postgres',
    contendedClaimExtraTrips: 1,
    create: async () => {
      const { store, drop } = await isolated();
      return closingWith(store, drop);
    },
  });
});
