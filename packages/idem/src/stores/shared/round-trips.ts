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

/**
 * Makes `store`'s methods and getters its own, bound to it: a store wrapped as `Object.create(store)` (a test's
 * or a user's decorator overriding one method) or spread into an object literal keeps working, as the stores
 * written as closures always did, although the class reads `#private` fields on `this`.
 */
export function bindMethods(store: object): void {
  const prototype = Object.getPrototypeOf(store) as object;
  for (const [name, descriptor] of Object.entries(Object.getOwnPropertyDescriptors(prototype))) {
    if (name === 'constructor') continue;
    if (typeof descriptor.value === 'function') {
      const method = descriptor.value as (...args: unknown[]) => unknown;
      Object.defineProperty(store, name, {
        value: method.bind(store),
        writable: true,
        enumerable: true,
        configurable: true,
      });
    } else if (descriptor.get) {
      const getter = descriptor.get.bind(store) as () => unknown;
      Object.defineProperty(store, name, { get: getter, enumerable: true, configurable: true });
    }
  }
}

/**
 * For a store whose every call is its round trip (memory): replaces each of `methods` on `store` with one that
 * reports the call's argument and what it returned (or threw) to `onRoundTrip`. Only when someone observes: the
 * methods stay the class's own otherwise.
 */
export function reportCalls<S extends object>(store: S, meter: RoundTripMeter, methods: ReadonlyArray<keyof S>): void {
  for (const op of methods) {
    const call = (store[op] as (arg: unknown) => Promise<unknown>).bind(store);
    Object.defineProperty(store, op, {
      value: (arg: unknown): Promise<unknown> => meter.observe(String(op), arg, call(arg)),
      writable: true,
      configurable: true,
    });
  }
}
