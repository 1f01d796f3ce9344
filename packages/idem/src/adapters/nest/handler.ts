/**
 * @module How the Nest interceptor sees the handler settle. It claims the key outermost, so every interceptor of
 * the app runs under the claim; but one inside it may answer before the handler is done — the usual timeout
 * interceptor (`timeout()` then `RequestTimeoutException`) answers 408 and drops the handler's Observable, whose
 * work goes on. A watcher placed innermost, appended to every controller method's own interceptors, subscribes to
 * the handler's Observable and keeps that subscription when the chain drops it: it sees the handler settle,
 * whatever the interceptors between do.
 */
import type { CallHandler, ExecutionContext, NestInterceptor } from '@nestjs/common';
import type { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { Observable } from 'rxjs';
import type { Run as HeldRun } from '../node/hold.js';

/** How an Observable ended: its last value, or its error. */
export type Outcome = { readonly value: unknown } | { readonly error: unknown };

/** What {@link keep} reports about its source. */
export interface Hooks {
  /** Each value, as it passes. */
  readonly value?: (value: unknown) => void;
  /** The source ended, before that is passed on. */
  readonly ended?: (outcome: Outcome) => void;
  /** The source ended after its subscriber had left. */
  readonly orphaned?: (outcome: Outcome) => void;
}

/**
 * The source, subscribed to once by this Observable itself: when its subscriber leaves before it ends (Nest tears a
 * handler's Observable down when its client goes away; `timeout()` drops it when it fires), the source is not
 * cancelled — the work it started goes on — and `hooks` still hear how it ends.
 *
 * @example
 * return keep(next.handle(), { ended: () => run.chainSettled() })
 */
export function keep(source: Observable<unknown>, hooks: Hooks): Observable<unknown> {
  return new Observable<unknown>((subscriber) => {
    let attached = true;
    let last: Outcome = { value: undefined };
    const end = (outcome: Outcome, pass: () => void): void => {
      hooks.ended?.(outcome);
      if (attached) pass();
      else hooks.orphaned?.(outcome);
    };
    source.subscribe({
      next: (value) => {
        hooks.value?.(value);
        last = { value };
        if (attached) subscriber.next(value);
      },
      error: (error: unknown) => end({ error }, () => subscriber.error(error)),
      complete: () => end(last, () => subscriber.complete()),
    });
    return () => {
      attached = false;
    };
  });
}

/**
 * One claimed request's handler: settled once the handler's own Observable has ended, or — when the watcher never
 * saw it begin (an interceptor answered without calling it, or the watcher is not installed) — once the chain the
 * interceptor subscribed to has.
 */
export class Run implements HeldRun {
  #began = false;
  #handler = false;
  #chain = false;
  #waiting: Array<() => void> = [];

  get settled(): boolean {
    return this.#handler || (this.#chain && !this.#began);
  }
  /** The watcher sees every handler settle. */
  get unseen(): boolean {
    return false;
  }
  began(): void {
    this.#began = true;
  }
  handlerSettled(): void {
    this.#handler = true;
    this.#wake();
  }
  chainSettled(): void {
    this.#chain = true;
    this.#wake();
  }
  /** Resolves true once settled; with `soon`, false if it has not by the next turn of the event loop. */
  whenSettled(soon: boolean): Promise<boolean> {
    if (this.settled) return Promise.resolve(true);
    return new Promise((resolve) => {
      const turn = soon ? setImmediate(() => resolve(false)) : undefined;
      this.#waiting.push(() => {
        clearImmediate(turn);
        resolve(true);
      });
    });
  }
  #wake(): void {
    if (this.settled) for (const resolve of this.#waiting.splice(0)) resolve();
  }
}

/** The run of each claimed request, by request object: the watcher finds its own here. */
const runs = new WeakMap<object, Run>();

/**
 * A run for this request, which the watcher reports to.
 *
 * @example
 * const run = watchRun(request)
 */
export function watchRun(request: object): Run {
  const run = new Run();
  runs.set(request, run);
  return run;
}

/** The innermost interceptor of every route: reports the handler's settling to its request's run. */
const watcher: NestInterceptor = {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const run = context.getType() === 'http' ? runs.get(context.switchToHttp().getRequest<object>()) : undefined;
    if (!run) return next.handle();
    run.began();
    return keep(next.handle(), { ended: () => run.handlerSettled() });
  },
};

/** Nest's metadata key for `@UseInterceptors()`. */
const INTERCEPTORS_METADATA = '__interceptors__';

/**
 * Calls `each` with every method of every controller the app has (inherited ones included), and its class.
 *
 * @example
 * eachHandler(discovery, scanner, (handler, type) => route(handler, type))
 */
export function eachHandler(
  discovery: DiscoveryService,
  scanner: MetadataScanner,
  each: (handler: object, type: object) => void,
): void {
  for (const wrapper of discovery.getControllers()) {
    const type = wrapper.metatype as (abstract new (...args: never[]) => unknown) | null | undefined;
    if (typeof type !== 'function') continue;
    const prototype = type.prototype as Record<string, unknown>;
    for (const name of scanner.getAllMethodNames(prototype)) {
      const handler = prototype[name];
      if (typeof handler === 'function') each(handler, type);
    }
  }
}

/**
 * Appends the watcher to the interceptors of every controller method (once; Nest reads them when it registers the
 * routes, after the providers are made): last, so it runs innermost, around the handler itself.
 *
 * @example
 * installWatcher(discovery, scanner)
 */
export function installWatcher(discovery: DiscoveryService, scanner: MetadataScanner): void {
  const metadata = Reflect as unknown as {
    getMetadata(key: string, target: object): unknown;
    defineMetadata(key: string, value: unknown, target: object): void;
  };
  eachHandler(discovery, scanner, (handler) => {
    const current = (metadata.getMetadata(INTERCEPTORS_METADATA, handler) as unknown[] | undefined) ?? [];
    if (!current.includes(watcher)) metadata.defineMetadata(INTERCEPTORS_METADATA, [...current, watcher], handler);
  });
}
