/** The DynamoDB store against the shared conformance suite on dynalite, each case on a table of its own. */
import { describeStoreConformance } from 'idem/testing';
import { isolated, SINGLE_TABLE } from '#test/fixtures/dynamodb.js';

// dynalite ignores ReturnValuesOnConditionCheckFailure, so a refused claim gets no item back with its
// ConditionalCheckFailedException and the store reads it with a consistent GetItem: 2 round trips here, 1 on
// DynamoDB itself (the request still asks for ALL_OLD; see claim.test.ts).
describeStoreConformance({ name: 'dynamodb (dynalite)', create: () => isolated(), refusedClaimTrips: 2 });

// The same contract in a single-table layout: every attribute renamed, a composite key, list through a GSI.
describeStoreConformance({
  name: 'dynamodb (dynalite, single-table names, sort key, list index)',
  create: () => isolated(SINGLE_TABLE),
  refusedClaimTrips: 2,
});
