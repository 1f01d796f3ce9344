/**
 * Where the real services for integration tests live, and what to do when one is down: with `CI=true` an
 * unreachable service fails the run; elsewhere its tests are skipped with a loud reason.
 */
import { connect } from 'node:net';

export const POSTGRES_URL = process.env.IDEM_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.IDEM_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const MYSQL_URL = process.env.IDEM_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
export const AMQP_URL = process.env.IDEM_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const NATS_URL = process.env.IDEM_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

/** Resolves true when something accepts TCP connections at the URL's host and port. */
export function reachable(url: string, timeoutMs = 1_000): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port) }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.setTimeout(timeoutMs, () => {
      socket.destroy();
      resolve(false);
    });
    socket.on('error', () => resolve(false));
  });
}

/**
 * For `describe.skipIf(!(await serviceAvailable(...)))`: true when the service answers; false (with a loud
 * warning) when it does not outside CI; throws under `CI=true`.
 */
export async function serviceAvailable(name: string, url: string): Promise<boolean> {
  if (await reachable(url)) return true;
  const message = `${name} is not reachable at ${url}`;
  if (process.env.CI === 'true') throw new Error(`${message}; CI requires it.`);
  console.warn(`\n*** SKIPPING ${name} tests: ${message}. Set the URL env var or start the service. ***\n`);
  return false;
}
