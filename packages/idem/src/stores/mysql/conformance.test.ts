/**
 * The MySQL store against the shared conformance suite, each case on a table of its own: on the server's default
 * isolation (REPEATABLE READ), under READ COMMITTED, and on MariaDB with SIMULTANEOUS_ASSIGNMENT.
 */
import type mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { describeStoreConformance } from 'idem/testing';
import { available, isolated, mariadb, newPool } from '#test/fixtures/mysql.js';
import { closingWith } from '../../testing/fixtures.js';

/** A store on a fresh table of `on`, its table dropped when the suite closes it. */
const fresh = async (on?: mysql.Pool) => {
  const { store, drop } = await isolated(on);
  return closingWith(store, drop);
};

/**
 * The suite again, on a pool whose every session first runs `setup` (`check` reads the setting back once);
 * `enabled` false skips it.
 */
function describeOnSessions(
  title: string,
  name: string,
  setup: string,
  check: (sessions: mysql.Pool) => Promise<void>,
  enabled = true,
): void {
  describe.runIf(enabled)(title, () => {
    let sessions: mysql.Pool;
    beforeAll(async () => {
      sessions = newPool({ connectionLimit: 5 });
      sessions.pool.on('connection', (connection) => {
        connection.query(setup);
      });
      await check(sessions);
    });
    afterAll(async () => {
      await sessions?.end();
    });
    describeStoreConformance({ name, contendedClaimExtraTrips: 1, create: () => fresh(sessions) });
  });
}

describe.skipIf(!available)('mysql store', () => {
  describeStoreConformance({
    name: 'mysql',
    // A claim runs again when InnoDB picks it as a deadlock's victim (see the comment on `claim`).
    contendedClaimExtraTrips: 1,
    create: () => fresh(),
  });

  describeOnSessions(
    'under READ COMMITTED (the server default here is REPEATABLE READ)',
    'mysql (READ COMMITTED)',
    'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED',
    async (sessions) => {
      // tx_isolation on MariaDB, transaction_isolation on MySQL 8.
      const [rows] = await sessions.query<mysql.RowDataPacket[]>(
        `SHOW SESSION VARIABLES WHERE Variable_name IN ('tx_isolation', 'transaction_isolation')`,
      );
      expect(new Set(rows.map((row) => String(row.Value)))).toEqual(new Set(['READ-COMMITTED']));
    },
  );

  // Sessions of this pool evaluate ON DUPLICATE KEY UPDATE assignments all against the old row, not left to
  // right: the claim must decide the same way. The mode exists on MariaDB only.
  describeOnSessions(
    'with MariaDB’s SIMULTANEOUS_ASSIGNMENT (every assignment sees the old row)',
    'mysql (SIMULTANEOUS_ASSIGNMENT)',
    `SET SESSION sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT')`,
    async (sessions) => {
      const [rows] = await sessions.query<mysql.RowDataPacket[]>('SELECT @@SESSION.sql_mode AS mode');
      expect(String(rows[0]?.mode)).toContain('SIMULTANEOUS_ASSIGNMENT');
    },
    mariadb,
  );
});
