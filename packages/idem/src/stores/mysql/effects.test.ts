/** The MySQL store's effects: the work's writes commit in the record's transaction, or not at all. */
import { describe } from 'vitest';
import { available, MYSQL } from '#test/fixtures/mysql.js';
import { describeTransactionalCompletion } from '#test/fixtures/sql.js';

describe.skipIf(!available)('mysql store', () => {
  describeTransactionalCompletion(MYSQL);
});
