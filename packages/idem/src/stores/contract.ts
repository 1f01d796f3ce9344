/**
 * @module The store contract (defined beside the record in core): the one path by which a store imports the
 * contract. What stores share besides lives in `stores/shared/`.
 */
export * from '../core/record.js';

/** The header codec lives in shared/headers.ts; re-exported here until every store imports it from there. */
export { decodeHeaders, encodeHeaders } from './shared/headers.js';
