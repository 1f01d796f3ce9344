-- Idem: MySQL / MariaDB store schema for the default table name, `idempotency_records`, in the connection's
-- database. The same DDL `mysqlStore({ pool }).migrate()` runs; `mysqlSchemaSql({ table })` prints it for another
-- name. Idempotent. Run: mysql -h host -u user -p database < schema.sql
-- Text columns are VARBINARY: keys compare byte for byte, whatever the character set or collation. Times are
-- epoch milliseconds in BIGINT columns. expires_at index: the batched sweep. (scope, claimed_at) index: list.
-- migrate() also checks that max_allowed_packet holds a response of maxResponseBytes (docs/STORES.md).

CREATE TABLE IF NOT EXISTS `idempotency_records` (
  pk               VARBINARY(1024)  NOT NULL,
  scope            VARBINARY(1024)  NOT NULL,
  `key`            VARBINARY(1024)  NOT NULL,
  status           ENUM('in_progress', 'succeeded', 'failed') NOT NULL,
  fingerprint      VARBINARY(255)   NOT NULL,
  id               VARBINARY(255)   NOT NULL,
  token            VARBINARY(255)   NOT NULL,
  claimed_at       BIGINT           NOT NULL,
  lease_expires_at BIGINT           NOT NULL,
  expires_at       BIGINT           NOT NULL,
  retryable        BOOLEAN          NOT NULL DEFAULT FALSE,
  result_id        VARBINARY(1024),
  response_status  INT,
  response_headers LONGBLOB,
  response_body    LONGBLOB,
  PRIMARY KEY (pk),
  KEY `idempotency_records_expires_at_idx` (expires_at),
  KEY `idempotency_records_scope_claimed_at_idx` (scope, claimed_at)
) ENGINE = InnoDB;
