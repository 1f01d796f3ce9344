/**
 * What every store keeps of its round trips: how many it sent (`roundTrips`), whether it is closed, and the
 * `onRoundTrip` observer, whose failure never changes what the store does.
 */
import { configError } from '../../core/errors.js';
import type { RoundTrip } from '../contract.js';

export class RoundTripMeter {
  readonly onRoundTrip: ((trip: RoundTrip) => void) | undefined;
  readonly #store: string;
  #count = 0;
  #closed = false;

  /** `store` names the store in errors; `onRoundTrip` is checked here (a configuration error unless a function). */
  constructor(store: string, onRoundTrip: unknown) {
    if (onRoundTrip !== undefined && typeof onRoundTrip !== 'function') {
      throw configError('onRoundTrip', 'a function', onRoundTrip);
    }
    this.#store = store;
    this.onRoundTrip = onRoundTrip as ((trip: RoundTrip) => void) | undefined;
  }

  get count(): number {
    return this.#count;
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    this.#closed = true;
  }

  /** Throws `<store> store is closed` once the store is closed. */
  open(): void {
    if (this.#closed) throw new Error(`${this.#store} store is closed`);
  }

  /** One request to the backend: refused once the store is closed, else counted. */
  trip(): void {
    if (this.#closed) throw new Error(`${this.#store} store is closed`);
    this.#count++;
  }

  /** Counts one request that has no closed guard of its own (the closed check was made for the whole call). */
  add(): void {
    this.#count++;
  }

  report(trip: RoundTrip): void {
    try {
      this.onRoundTrip?.(trip);
    } catch {
      // An observer's failure is not the store's: the request already happened, and its result stands.
    }
  }

  /**
   * `sent`, with its outcome reported as a round trip of `op` once it settles (`response` shapes what the observer
   * sees of the result). Call it only when `onRoundTrip` is set.
   */
  observe<R>(op: RoundTrip['op'], request: unknown, sent: Promise<R>, response?: (value: R) => unknown): Promise<R> {
    return sent.then(
      (value) => {
        this.report({ op, request, response: response ? response(value) : value });
        return value;
      },
      (error: unknown) => {
        this.report({ op, request, error });
        throw error;
      },
    );
  }
}
