/** The Redis store against the shared conformance suite, through each driver, each case under a prefix of its own. */
import { describe } from 'vitest';
import { describeStoreConformance } from 'idem/testing';
import { available, drivers, isolated } from '#test/fixtures/redis.js';

describe.skipIf(!available)('redis store', () => {
  for (const driver of drivers) {
    describeStoreConformance({ name: `redis (${driver.name})`, create: () => isolated(driver) });
  }
});
