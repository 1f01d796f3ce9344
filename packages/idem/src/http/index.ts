/**
 * @module `idem/http` — the Web-standard layer: middleware, problem+json, and response replay; and everything a
 * framework adapter is built from (ours and yours): the gate, the stored-response helpers, a Node request's body
 * read without consuming it, and the core names an adapter's signatures use.
 */
export { createGate, idempotency, serveWeb } from './middleware.js';
export type {
  Admission,
  Answer,
  Claim,
  Declaration,
  Gate,
  GateRequest,
  HandlerContext,
  HttpReconcileAnswer,
  IdempotencyOptions,
  IdempotentFetch,
  IdempotentHandler,
  ServeOptions,
} from './middleware.js';
export { problem, problemFor } from './problem.js';
export type { ProblemInit, ProblemSlug } from './problem.js';
export {
  BodyTooLargeError,
  DEFAULT_REPLAY_HEADERS,
  NEVER_REPLAYED,
  REPLAYED_HEADER,
  bodyFor,
  joinBytes,
  readBytes,
  replayParts,
  replayResponse,
  storableHeaders,
  storableNodeHeaders,
} from './replay.js';
export { responseTooLarge, storedProblem, storedResponse } from './stored.js';
export { readAndRestore } from './node-body.js';
export { requestBytes } from './held-body.js';
export type { NodeRequestBody } from './node-body.js';
// For adapters: the core names their options, outcomes and signatures use (also exported by `idem`).
export { classifyStatus } from '../core/engine.js';
export type { Engine, Lease, OutcomeKind } from '../core/engine.js';
export type { StoredResponse } from '../core/record.js';
export { configError } from '../core/errors.js';
export { isThenable } from '../core/local.js';
