/**
 * @module How `idem/express` sees its handler settle (`route()`), and the V8 dictionary-mode step its hot path
 * takes on every request and response it touches. The response itself is held by `adapters/node/hold.ts`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response as ExpressResponse } from 'express';
import { isThenable } from '../../http/index.js';
import { heldState, type Run } from '../node/hold.js';

/**
 * A response held by the bare middleware: it cannot see the handler settle (no `route()` has wrapped one yet), so a
 * retryable answer abandons the lease. One object for every response (no allocation per request).
 */
export const UNSEEN: Run = Object.freeze({
  settled: false,
  unseen: true,
  whenSettled: () => Promise.resolve(true),
});

/** The handlers `route()` wrapped for one response: settled once every one has, and none handed the work on. */
class RouteRun implements Run {
  /** Handlers wrapped by `route()` still running. */
  running = 0;
  /** A wrapped function returned no promise or handed on with `next()`: its settling says nothing of the work. */
  handedOn = false;
  /** Called once `running` drops to 0: set by a retryable answer that came before the handler settled. */
  waiting: (() => void) | undefined = undefined;

  get settled(): boolean {
    return this.running === 0 && !this.handedOn;
  }
  get unseen(): boolean {
    return this.handedOn;
  }
  handlerSettled(): void {
    if (--this.running > 0 && !this.handedOn) return;
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.();
  }
  whenSettled(soon: boolean): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.running <= 0) return resolve(true);
      const turn = soon
        ? setImmediate(() => {
            this.waiting = undefined;
            resolve(false);
          })
        : undefined;
      this.waiting = () => {
        clearImmediate(turn);
        resolve(true);
      };
    });
  }
}

/**
 * `ExpressIdempotency.route`: one function for every middleware (the state it marks is the response's).
 *
 * @example
 * app.post('/v1/charges', guard, express.json(), route(async (req, res) => { ... }))
 */
export function route<H extends (req: Request, res: ExpressResponse, next: NextFunction) => unknown>(handler: H): H {
  return function idempotentRoute(req: Request, res: ExpressResponse, next: NextFunction): unknown {
    const held = heldState(res);
    if (!held) return handler(req, res, next);
    if (!(held.run instanceof RouteRun)) held.run = new RouteRun();
    const run = held.run as RouteRun;
    run.running++;
    let result: unknown;
    try {
      result = handler(req, res, (error?: unknown) => {
        // Handed on to the next middleware ('route' and 'router' too): the work goes on past the promise's end.
        if (error === undefined || error === 'route' || error === 'router') run.handedOn = true;
        next(error);
      });
    } catch (error) {
      run.handlerSettled();
      throw error;
    }
    if (!isThenable(result)) {
      // A callback-style handler, a router, a pre-handler: its return is not the end of its work.
      run.handedOn = true;
      run.handlerSettled();
      return result;
    }
    // Settled first, then the rejection goes on to Express (which calls next(err)): its answer finds it settled.
    return Promise.resolve(result).finally(() => run.handlerSettled());
  } as H;
}

const SCRATCH = Symbol('idem.scratch');
const SCRATCH_2 = Symbol('idem.scratch.2');

/**
 * Turns a request or response into a dictionary (V8's slow properties) without adding a property. Under Express
 * every request and response has a hidden class of its own (their prototypes are set per request), so each
 * property added to one (a held response's wrappers; `req.body` from a body parser) makes V8 build yet another:
 * about 4 µs apiece (measured: see docs/BENCHMARKS.md); and every later access to it, by Node and Express, misses
 * its inline cache. A property deleted out of order turns the object into a dictionary, where additions are table
 * inserts and objects share a hidden class. The property deleted is EventEmitter's first own one, `_events`, put
 * straight back; a scratch property added and deleted is the fallback for an object without an own, configurable
 * `_events`. Nothing observable changes but the position of `_events` among the object's keys.
 */
export function toDictionary(res: ServerResponse | IncomingMessage): void {
  const own = res as unknown as Record<PropertyKey, unknown>;
  const events = own._events;
  if (Object.hasOwn(own, '_events') && Reflect.deleteProperty(own, '_events')) {
    own._events = events;
  } else {
    own[SCRATCH] = 0;
    own[SCRATCH_2] = 0;
    delete own[SCRATCH];
    delete own[SCRATCH_2];
  }
}
