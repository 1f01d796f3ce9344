/**
 * @module The store contract (defined beside the record in core): the one path by which a store imports the
 * contract. What stores share besides lives in `stores/shared/`.
 */
export * from '../core/record.js';
