/**
 * @module @node-idempotency/core 1.0.11 wrapped in an Express route the way its NestJS interceptor uses it:
 * `onRequest` before the work (409 on `REQUEST_IN_PROGRESS`), `onResponse(req, { body, additional })` after it,
 * and `onResponse(req, { error })` when the work throws (a failure is stored and replayed, not retried). The HTTP
 * benchmark (bench/server.ts) and the instruction counter (bench/instructions-run.ts) both serve it.
 */
import type { Idempotency } from '@node-idempotency/core';
import type { Request, Response } from 'express';

/** The route: `work` is the charge, given the request's `Idempotency-Key`. */
export function niRoute(idem: Idempotency, work: (key: string) => Promise<{ id: string }>) {
  return async (req: Request, res: Response): Promise<void> => {
    const params = {
      headers: req.headers as Record<string, unknown>,
      path: req.path,
      method: req.method,
      body: req.body as Record<string, unknown>,
    };
    let cached: { body?: unknown; additional?: Record<string, unknown>; error?: unknown } | undefined;
    try {
      cached = await idem.onRequest(params);
    } catch (error) {
      res.status(409).json({ error: (error as Error).message });
      return;
    }
    if (cached) {
      if (cached.error !== undefined) {
        res.status(500).json({ error: 'replayed error' });
        return;
      }
      const location = cached.additional?.location;
      if (typeof location === 'string') res.location(location);
      res.status(Number(cached.additional?.status ?? 200)).json(cached.body);
      return;
    }
    try {
      const charge = await work(req.get('idempotency-key') ?? '');
      const location = `/v1/charges/${charge.id}`;
      await idem.onResponse(params, { body: charge, additional: { status: 201, location } });
      res.status(201).location(location).json(charge);
    } catch (error) {
      await idem.onResponse(params, { error: { message: (error as Error).message } });
      throw error;
    }
  };
}
