/**
 * @module `idem` — the engine, its types and its errors. Stores live at `idem/stores/*`; HTTP at `idem/http`.
 */
export { createEngine, classifyStatus, RECOMMENDED_TTL_MS } from './core/engine.js';
export type {
  Decision,
  Engine,
  EngineOptions,
  Lease,
  Settlement,
  IdempotencyEvent,
  OutcomeKind,
  RunRequest,
  RunResult,
  StoreOp,
  WorkContext,
  WorkResult,
} from './core/engine.js';
export { idempotent, IdempotentFailure } from './core/function.js';
export type { ReconcileAnswer, ReconcileContext, ReconcileHook, TakeoverPolicy } from './core/takeover.js';
export { runLocal } from './core/local.js';
export type { LocalContext, LocalWork, LocalWorkResult } from './core/local.js';
export type {
  IdempotentContext,
  IdempotentFunction,
  IdempotentOptions,
  IdempotentReconcileAnswer,
} from './core/function.js';
export { IdempotencyError, isIdempotencyError } from './core/errors.js';
export type { IdempotencyErrorCode } from './core/errors.js';
export { fingerprint, fingerprintAsync, fingerprintsEqual, canonicalJson } from './core/fingerprint.js';
export type { FingerprintInput } from './core/fingerprint.js';
export { parseKey, recordPk, MAX_KEY_LENGTH } from './core/key.js';
export { systemClock, manualClock } from './core/clock.js';
export type { Clock, ManualClock, TimerHandle } from './core/clock.js';
export { isClaimable } from './core/record.js';
/** Store URLs (`IDEM_STORE`, `idem --store`): one parser, and the redaction of every credential they carry. */
export { parseStoreUrl, redact, redactUrl } from './core/store-url.js';
export type { StoreUrl } from './core/store-url.js';
export { sealed, sealOverhead, SealedRecordError } from './core/sealed.js';
export type { SealedOptions, SealedRecordReason, SealingKey } from './core/sealed.js';
export type {
  ClaimRequest,
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  IdempotencyStore,
  ListRequest,
  Outcome,
  RecordStatus,
  ReleaseRequest,
  LocalTransactionRequest,
  LocalTransactionResult,
  LocalTransactionWork,
  RenewRequest,
  RoundTrip,
  RoundTripObserver,
  StoredResponse,
  SweepRequest,
  WriteResult,
} from './core/record.js';
