/**
 * @module Structured JSON logs for the demo server (pino): one line per idempotency event, with the scope and a
 * hash of the key — never the key itself, a body or a credential.
 */
import { createHash } from 'node:crypto';
import { pino, type DestinationStream, type Logger } from 'pino';
import type { IdempotencyEvent } from 'idem';
import { ConfigError } from './config.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * The first 16 hex digits of the key's SHA-256: enough to find one key's lines, useless for replaying it.
 * An operator holding a customer's key finds its lines with `printf %s "$KEY" | sha256sum | cut -c1-16`.
 *
 * @example
 * keyHash('8e03978e-40d5-43e8-bc93-6894a57f9324') // → 16 hex digits
 */
export function keyHash(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 16);
}

export interface DemoLoggerOptions {
  /** Default `LOG_LEVEL` from the environment, else `info`. `debug` adds one line per store call. */
  readonly level?: string | undefined;
  /** Where lines go. Default stdout, written synchronously (lines keep their order with the startup line). */
  readonly destination?: DestinationStream;
}

export interface DemoLogger {
  readonly logger: Logger;
  /** Pass to the engine as `onEvent` (or call from yours). Never throws. */
  onEvent(event: IdempotencyEvent): void;
}

/** The events logged with the common fields only: at which level, saying what. */
const PLAIN: Record<'in_flight' | 'mismatch' | 'takeover' | 'lease_lost', readonly ['info' | 'warn', string]> = {
  in_flight: ['info', 'duplicate while the first attempt runs: 409'],
  mismatch: ['info', 'key reused with another payload: refused'],
  takeover: ['warn', 'took over a dead lease or re-ran a retryable failure'],
  lease_lost: ['warn', 'a running attempt lost its lease'],
};

/**
 * Creates the logger. Levels: executions, replays, 409s and mismatches are `info` (the pattern working);
 * takeovers, lost leases and refused stale writes are `warn`; store failures `error`; every store call `debug`.
 *
 * @example
 * const log = createLogger({ level: process.env.LOG_LEVEL })
 * createApp({ ...options, onEvent: log.onEvent })
 */
export function createLogger({
  level = process.env.LOG_LEVEL || 'info',
  destination,
}: DemoLoggerOptions = {}): DemoLogger {
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${level}".`);
  }
  const logger = pino(
    {
      level,
      formatters: { level: (label) => ({ level: label }) },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination ?? pino.destination({ dest: 1, sync: true }),
  );

  const onEvent = (event: IdempotencyEvent): void => {
    try {
      if (event.type === 'store_op') {
        const fields = { event: event.type, op: event.op, ms: Math.round(event.ms * 1000) / 1000 };
        if (event.ok) logger.debug(fields, 'store call');
        else logger.error({ ...fields, err: describeError(event.error) }, 'store call failed');
        return;
      }
      if (event.type === 'refused') {
        logger.info(
          { event: event.type, reason: event.reason, route: event.route, scope: event.scope },
          'refused before any claim',
        );
        return;
      }
      // The key is a bearer of the client's intent (whoever holds it can replay the answer): log its hash only.
      const fields = {
        event: event.type,
        scope: event.scope,
        keyHash: keyHash(event.key),
        id: event.id,
        route: event.route,
      };
      switch (event.type) {
        case 'executed':
          logger.info(
            { ...fields, outcome: event.outcome, status: event.status, ms: event.ms },
            'work ran; outcome recorded',
          );
          break;
        case 'replayed':
          logger.info({ ...fields, status: event.status }, 'replayed the stored response');
          break;
        case 'stale_write_refused':
          logger.warn({ ...fields, op: event.op }, 'a late writer was refused');
          break;
        default: {
          const [level, message] = PLAIN[event.type];
          logger[level](fields, message);
        }
      }
    } catch {
      // Logging must never change what happens to a payment.
    }
  };

  return { logger, onEvent };
}

/** A store error's name, code and message: never its parameters or the request that caused it. */
function describeError(error: unknown): { name?: string; code?: string; message?: string } {
  if (!(error instanceof Error)) return { message: String(error) };
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, ...(typeof code === 'string' ? { code } : {}) };
}
