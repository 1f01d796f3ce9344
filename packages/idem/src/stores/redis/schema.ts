/**
 * The key layout, Redis's schema (index.ts tells why): a record is the hash `<prefix>{IDEMPOTENCY#<scope>}#<key>`,
 * its scope's index the sorted set `<prefix>{IDEMPOTENCY#<scope>}:claims`.
 */

export const PK_PREFIX = 'IDEMPOTENCY#';

/**
 * The keys of the record `pk` (`IDEMPOTENCY#<scope>#<key>`, the scope's `#` and `%` escaped by `recordPk`, so its
 * second `#` ends the scope): the record's hash, its scope's index, and how the index names it (`base` + `member`).
 */
export function redisKeys(prefix: string, pk: string): { record: string; index: string; base: string; member: string } {
  const end = pk.indexOf('#', PK_PREFIX.length);
  if (!pk.startsWith(PK_PREFIX) || end === -1)
    throw new Error(`redis store: ${pk} is not a record pk (IDEMPOTENCY#<scope>#<key>)`);
  const tag = `${prefix}{${pk.slice(0, end)}}`;
  const member = pk.slice(end + 1);
  return { record: `${tag}#${member}`, index: `${tag}:claims`, base: `${tag}#`, member };
}

/** What a key found under the prefix is: a record (`…}#<key>`), a scope's index (`…}:claims`), or neither. */
export function parseKey(
  prefix: string,
  key: string,
): ({ kind: 'record' | 'index' } & ReturnType<typeof redisKeys>) | undefined {
  const rest = key.slice(prefix.length);
  const end = rest.indexOf('#', PK_PREFIX.length + 1);
  if (end > 0 && rest[end - 1] === '}') {
    return { kind: 'record', ...redisKeys(prefix, `${rest.slice(1, end - 1)}#${rest.slice(end + 1)}`) };
  }
  if (end === -1 && rest.endsWith('}:claims')) return { kind: 'index', ...redisKeys(prefix, `${rest.slice(1, -8)}#`) };
  return undefined;
}

/** Escapes Redis glob metacharacters so `text` matches only itself in a `SCAN MATCH` pattern. */
export function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}
