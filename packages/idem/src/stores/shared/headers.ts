/** The header codec of the stores that keep a response's headers as JSON text. */

export function encodeHeaders(headers: ReadonlyArray<readonly [string, string]>): string {
  return JSON.stringify(headers);
}

export function decodeHeaders(text: string): Array<[string, string]> {
  return JSON.parse(text) as Array<[string, string]>;
}
