/**
 * @module `idem/http` — the Web-standard layer: middleware, problem+json, and response replay.
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
  readBytes,
  replayParts,
  replayResponse,
  storableHeaders,
} from './replay.js';
