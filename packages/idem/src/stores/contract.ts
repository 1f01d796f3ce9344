/**
 * @module The store contract (defined beside the record in core) and the helpers stores share: the one path by
 * which a store imports the contract.
 */
export * from '../core/record.js';

/** Serialised form of a response's headers, shared by stores that keep them as JSON text. */
export function encodeHeaders(headers: ReadonlyArray<readonly [string, string]>): string {
  return JSON.stringify(headers);
}

export function decodeHeaders(text: string): Array<[string, string]> {
  return JSON.parse(text) as Array<[string, string]>;
}
