/**
 * @module dynalite, an in-process DynamoDB lookalike on LevelDB in memory, for tests and the demo's
 * `IDEM_STORE=dynamodb:local`. Not for production: it has no native TTL and ignores
 * `ReturnValuesOnConditionCheckFailure`, and it forgets everything on close. `dynalite` is a development
 * dependency, loaded only when this starts.
 */
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { configError } from '../../core/errors.js';

/** The subset of dynalite's `http.Server` this file uses. */
interface DynaliteServer {
  listen(port: number, host: string, callback: () => void): unknown;
  once(event: 'error', listener: (error: Error) => void): unknown;
  off(event: 'error', listener: (error: Error) => void): unknown;
  address(): AddressInfo | string | null;
  close(callback: (error?: Error) => void): unknown;
  closeAllConnections?(): void;
}
type Dynalite = (options: { createTableMs: number; deleteTableMs: number; updateTableMs: number }) => DynaliteServer;

export interface LocalDynamoOptions {
  /** Port on 127.0.0.1. Default 0: a free one, chosen by the OS. */
  readonly port?: number;
  /** How long tables stay CREATING / DELETING / UPDATING. Default 0 (dynalite's own default is 500 ms). */
  readonly tableStateMs?: number;
}

export interface LocalDynamo {
  /** `http://127.0.0.1:<port>` */
  readonly endpoint: string;
  /** A client for the endpoint: region `local`, dummy credentials. Destroyed by `close`. */
  readonly client: DynamoDBClient;
  /** Destroys the client and stops dynalite. */
  close(): Promise<void>;
}

/**
 * Starts dynalite in this process on 127.0.0.1.
 *
 * @example
 * const local = await startLocalDynamo()
 * const store = dynamodbStore({ client: local.client, table: 'idempotency' })
 * await store.createTable()
 * // ...
 * await local.close()
 */
export async function startLocalDynamo({ port = 0, tableStateMs = 0 }: LocalDynamoOptions = {}): Promise<LocalDynamo> {
  if (!Number.isInteger(port) || port < 0 || port > 65_535)
    throw configError('port', 'an integer from 0 to 65535', port);
  if (!Number.isFinite(tableStateMs) || tableStateMs < 0) {
    throw configError('tableStateMs', 'a non-negative number', tableStateMs);
  }

  let dynalite: Dynalite;
  try {
    dynalite = createRequire(import.meta.url)('dynalite') as Dynalite;
  } catch (error) {
    throw new Error('startLocalDynamo needs the `dynalite` package: npm install --save-dev dynalite', { cause: error });
  }
  const server = dynalite({ createTableMs: tableStateMs, deleteTableMs: tableStateMs, updateTableMs: tableStateMs });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error(`dynalite is listening on ${String(address)}`);
  const endpoint = `http://127.0.0.1:${address.port}`;
  const client = new DynamoDBClient({
    region: 'local',
    endpoint,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });

  let closing: Promise<void> | undefined;
  return {
    endpoint,
    client,
    close: () =>
      (closing ??= new Promise<void>((resolve, reject) => {
        client.destroy();
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections?.();
      })),
  };
}
