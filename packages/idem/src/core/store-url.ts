/**
 * @module Store URLs (`IDEM_STORE`, `idem --store`), read in one place, and the one redaction of what they carry
 * (and of the http(s) URLs the CLI prints: `idem probe`'s target and count URL).
 * Parsing opens nothing: it returns the driver's connection options, Idem's own options from the query
 * (`?schema=`, `?prefix=`, …) and `shown`, the URL as it may be printed. No password is ever printed: not in the
 * user info (`user:pw@`, `:pw@`), not in the query (`?password=`, `sslpassword`, `token`, `secretAccessKey`, …),
 * not from a URL that does not parse (only its scheme is shown), and not where a driver's error repeats it.
 */
import { IdempotencyError } from './errors.js';

/** A Redis Cluster node to start from; the others are discovered. */
export interface SeedNode {
  readonly host: string;
  readonly port: number;
}

/** The store a URL names: what to hand its driver, and the store's own options (only those the URL sets). */
export type StoreUrl = { readonly shown: string } & (
  | { readonly kind: 'memory' }
  | { readonly kind: 'sqlite'; readonly path: string }
  | {
      readonly kind: 'postgres';
      readonly connectionString: string;
      readonly options: { schema?: string; table?: string };
    }
  | { readonly kind: 'mysql'; readonly uri: string; readonly options: { table?: string } }
  | { readonly kind: 'redis'; readonly url: string; readonly options: RedisUrlOptions }
  | {
      readonly kind: 'redis-cluster';
      readonly nodes: readonly SeedNode[];
      /** ioredis `redisOptions`: the user name and password of the URL, and the rest of its query. */
      readonly redisOptions: Readonly<Record<string, string>>;
      readonly options: RedisUrlOptions;
    }
  | {
      readonly kind: 'dynamodb';
      /** The DynamoDBClient's endpoint and, on loopback, placeholder credentials; absent for `dynamodb:local`. */
      readonly client?: {
        endpoint: string;
        region?: string;
        credentials?: { accessKeyId: string; secretAccessKey: string };
      };
      readonly options: { table?: string };
    }
);

interface RedisUrlOptions {
  prefix?: string;
  replicas?: number;
  replicaTimeoutMs?: number;
}

const ACCEPTED =
  'sqlite:<path>, memory:, postgres://user@host:5432/db[?schema=name&table=name], ' +
  'mysql://user[:password]@host:3306/db[?table=name], redis://host:6379[/db][?prefix=name:&replicas=1&replicaTimeoutMs=500], ' +
  'redis-cluster://host:port[,host:port…][?prefix=name:], dynamodb://host:port[?table=name&region=r], dynamodb:local[?table=name]';

/** Idem's own options in each kind's query: taken out before the driver sees the URL. */
const OWN = {
  postgres: ['schema', 'table'],
  mysql: ['table'],
  redis: ['prefix', 'replicas', 'replicaTimeoutMs'],
  'redis-cluster': ['prefix', 'replicas', 'replicaTimeoutMs'],
  dynamodb: ['table', 'region'],
} as const;

const KINDS: Record<string, 'postgres' | 'mysql' | 'redis' | 'redis-cluster' | 'dynamodb'> = {
  postgres: 'postgres',
  postgresql: 'postgres',
  mysql: 'mysql',
  redis: 'redis',
  rediss: 'redis',
  'redis-cluster': 'redis-cluster',
  dynamodb: 'dynamodb',
};

/** Where a URL's user info may start in any text: a scheme starting a word, `://`, a user name and its `:`. */
const USER_INFO_START = /(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*:\/\/[^\s:@/?#]*:/gi;

/**
 * `text` with the password of every URL in it `***`: from the user name's `:` to the last `@` of the run of
 * non-space characters the URL starts (a password may hold `@`, `/` or `#`). Each run is scanned once: a pattern
 * scanning to the last `@` from every scheme in it was quadratic (`a://` repeated: 26 s for 256 K characters).
 */
function maskUserInfo(text: string): string {
  let out = '';
  let from = 0;
  USER_INFO_START.lastIndex = 0;
  for (let match = USER_INFO_START.exec(text); match; match = USER_INFO_START.exec(text)) {
    const colon = match.index + match[0].length;
    const space = text.slice(colon).search(/\s/);
    const end = space < 0 ? text.length : colon + space;
    const at = text.lastIndexOf('@', end - 1);
    // No `@` left in the run: no URL in it has user info.
    if (at < colon) {
      USER_INFO_START.lastIndex = end;
      continue;
    }
    out += `${text.slice(from, colon)}***`;
    from = at;
    USER_INFO_START.lastIndex = at + 1;
  }
  return out + text.slice(from);
}

/** A parameter name that says it holds a credential: password, sslpassword, pwd, token, apiKey, secretAccessKey, jwt, … */
const SECRET_NAME = /pass|pwd|secret|token|key|auth|cred|sig|jwt/i;
/** A name that holds a credential in a URL's query or fragment only: an OAuth authorization code (`#code=`). */
const PARAM_SECRET_NAME = /^code=?$/i;
/** The schemes an `Authorization`-like value may start with, masked with the value after them. */
const SCHEMES =
  'bearer|basic|digest|token|negotiate|ntlm|apikey|dpop|hmac|sharedkey(?:lite)?|aws4-hmac-sha256|hoba|mutual|' +
  'vapid|scram-sha-(?:1|256)|gnap|privatetoken|signature|hawk|oauth|mac';
/**
 * `name=value` or `name: value` (a query, a DSN, JSON), the name at a boundary; masked when the name, as written or
 * percent-decoded (`p%61ssword`, which drivers read as `password`), is a {@link SECRET_NAME}; the value with its
 * auth scheme (`token: Negotiate …`), quoted with its escapes (`"a""b"`, `'a''b'`, `'it\'s'`, `"a\"b"`) or in ODBC
 * braces (`Pwd={a;b}}c}`). The name is matched whole and tested after: a pattern with the secret word inside it
 * backtracks quadratically on a long word. Every closing quote or brace is optional and each step of a quoted value
 * has one way to match, so a value never open is scanned once, to the end of the text (`Pwd={` repeated was
 * quadratic: 7.4 s for 256 K characters).
 */
const CREDENTIAL = new RegExp(
  `(?<=^|[\\s?&;,({["':])([\\w.%-]+)(["']?\\s*(?::=|=>|[=:])\\s*)(?:(?:${SCHEMES})\\s+)?` +
    `(?:"(?:[^"\\\\]|""|\\\\[\\s\\S])*"?|'(?:[^'\\\\]|''|\\\\[\\s\\S])*'?|\\{(?:[^}]|\\}\\})*\\}?|[^\\s&;"']*)`,
  'gi',
);
/** An `Authorization` header (`Proxy-Authorization`, …): whatever its scheme, the rest of the line is its value. */
const AUTH_HEADER = /(?<=^|[\s?&;,({["'])((?:[\w-]*-)?authorization["']?[ \t]*:)[^\r\n]*/gi;
/** The same pair in a URL query (after `?` or `&`): its value runs to the next `&`, as a driver reads it. */
const QUERY_CREDENTIAL = /(?<=[?&])([\w.%-]+=)[^\s&]*/gi;
/** True when `name`, as written or percent-decoded, matches `pattern`. */
const named = (pattern: RegExp, name: string): boolean =>
  pattern.test(name) || (name.includes('%') && pattern.test(attempt(() => decodeURIComponent(name)) ?? ''));
/** True when a parameter's name, as written or percent-decoded, says it holds a credential. */
const secretName = (name: string): boolean => named(SECRET_NAME, name);
/** The same for a parameter of a URL's query or fragment, where `code` is one too. */
const secretParam = (name: string): boolean => secretName(name) || named(PARAM_SECRET_NAME, name);
/** A query or fragment with its credential parameters' values `***`. */
const maskParams = (text: string, pattern: RegExp): string =>
  text.replace(pattern, (all, name: string) => (secretParam(name) ? `${name}***` : all));

/** An http(s) URL: an API's (the probe's target, its count URL), where the user name may be the credential. */
const WEB = /^https?:\/\//i;
/** The same pair in a fragment (`#access_token=…&state=…`), from its start or after `&`. */
const FRAGMENT_CREDENTIAL = /(?<=^|&)([\w.%-]+=)[^&]*/gi;

/**
 * Reads a store URL, naming it `name` in errors (`CONFIG_INVALID`, the URL redacted). A URL that does not
 * parse as written — a password with an unencoded `@`, `#`, `/` or `?` — is refused showing its scheme only.
 *
 * @example
 * const parsed = parseStoreUrl(process.env.IDEM_STORE ?? 'memory:', 'IDEM_STORE') // { kind: 'redis', url, options, shown }
 */
export function parseStoreUrl(raw: string, name = 'the store URL'): StoreUrl {
  const fail = (problem: string) => new IdempotencyError('CONFIG_INVALID', `${name} ${problem}`);
  if (raw === 'memory:') return { kind: 'memory', shown: raw };
  if (raw.startsWith('sqlite:')) {
    const path = raw.slice('sqlite:'.length);
    if (!path) throw fail('sqlite:<path> needs a path, e.g. sqlite:./.idem/idem.db');
    return { kind: 'sqlite', path, shown: raw };
  }
  if (/^dynamodb:local(\?|$)/.test(raw)) {
    const { stripped, own } = idemOptions(raw, ['table']);
    return { kind: 'dynamodb', options: Object.fromEntries(own), shown: redactUrl(stripped) };
  }
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(raw)?.[1]?.toLowerCase() ?? '';
  const kind = KINDS[scheme];
  if (!kind) throw fail(`must be one of ${ACCEPTED}; got "${redactUrl(raw)}".`);
  const parts = urlParts(raw);
  if (!parts || (kind !== 'redis-cluster' && !parsesAsUrl(raw))) {
    throw fail(
      `is not a valid store URL (${scheme}://…): percent-encode any @ # / ? : % or space in its user name and password.`,
    );
  }
  const { stripped, own } = idemOptions(raw, OWN[kind]);
  const shown = redactUrl(stripped);
  const options = Object.fromEntries(own);
  const redis = (): RedisUrlOptions => {
    for (const key of ['replicas', 'replicaTimeoutMs'] as const) {
      const value = own.get(key);
      if (value !== undefined && !/^\d{1,9}$/.test(value))
        throw fail(`?${key}= must be a whole number, got ${JSON.stringify(value)}.`);
    }
    const whole = (key: string) => (own.has(key) ? { [key]: Number(own.get(key)) } : {});
    return {
      ...(own.has('prefix') ? { prefix: options.prefix as string } : {}),
      ...whole('replicas'),
      ...whole('replicaTimeoutMs'),
    };
  };
  const url = new URL(kind === 'redis-cluster' ? 'redis://cluster' : raw);
  switch (kind) {
    case 'postgres':
      return { kind, connectionString: stripped, options, shown };
    case 'mysql':
      if (url.pathname.length <= 1) throw fail(`mysql://user@host:3306/db needs a database, got "${shown}".`);
      return { kind, uri: stripped, options, shown };
    case 'redis':
      return { kind, url: stripped, options: redis(), shown };
    case 'redis-cluster': {
      const nodes = parts.hosts.split(',').map(seedNode);
      if (nodes.some((node) => node === undefined)) {
        throw fail(`redis-cluster://host:port[,host:port…] needs host:port pairs, got "${shown}".`);
      }
      // As ioredis reads a redis:// URL: the user info, and the rest of the query as options.
      const redisOptions = {
        ...Object.fromEntries(new URLSearchParams(stripped.split('?')[1])),
        ...(parts.username ? { username: parts.username } : {}),
        ...(parts.password ? { password: parts.password } : {}),
      };
      return { kind, nodes: nodes as SeedNode[], redisOptions, options: redis(), shown };
    }
    case 'dynamodb': {
      if (!url.hostname) throw fail(`dynamodb://host:port needs a host, got "${shown}".`);
      const loopback = ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
      const client = {
        endpoint: `${loopback ? 'http' : 'https'}://${url.host}`,
        ...(options.region === undefined ? {} : { region: options.region }),
        // A local engine takes any credentials; elsewhere the SDK's default chain (env, profile, role) applies.
        ...(loopback ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
      };
      return { kind, client, options: options.table === undefined ? {} : { table: options.table }, shown };
    }
  }
}

/**
 * A URL as it may be printed: the password in its user info and every credential parameter of its query
 * replaced by `***` (and the same value wherever else it stands: a user name equal to the password). A URL that
 * does not parse is shown as its scheme only (`redis://…`).
 *
 * @example
 * redactUrl('redis://:S3CRET@cache:6379/0?password=S3CRET') // 'redis://:***@cache:6379/0?password=***'
 */
export function redactUrl(url: string): string {
  if (WEB.test(url)) return redactWebUrl(url);
  if (urlParts(url) || (!url.includes('@') && !url.includes('://'))) return redact(url, url);
  return `${/^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(url)?.[0] ?? ''}…`;
}

/**
 * An http(s) URL as it may be printed: its whole user info `***` (an API key is often the user name, as in
 * `https://sk_live_…:@api.example`), every credential parameter of its query and of its fragment (`#access_token=`)
 * `***`. One that does not parse shows its scheme only.
 */
function redactWebUrl(url: string): string {
  // One a URL parser refuses is shown as its scheme: `https://u:S3CR#ET/99@host/` (a port of `S3CR`) can only be
  // read one way by this function and another by its reader.
  if (attempt(() => new URL(url)) === undefined) return `${/^https?:\/\//i.exec(url)?.[0] ?? ''}…`;
  // The user info runs to the last `@` of the URL: a password may hold a `/`, `#` or `?`, which a parser reads as the
  // end of the authority (`https://u:443/#S3CRET@host/`: a port of 443, the rest a fragment), so it is cut here
  // first, as written. An `@` that belongs to the path or query hides the host too: over-masked, never leaked.
  const start = url.indexOf('//') + 2;
  const at = url.lastIndexOf('@');
  // A credential parameter's value runs to the next `&`, a `#` included (`?api_key=AB#CD`).
  const masked = maskParams(at >= start ? `${url.slice(0, start)}***${url.slice(at)}` : url, QUERY_CREDENTIAL);
  const hash = masked.indexOf('#');
  const base = hash < 0 ? masked : masked.slice(0, hash);
  if (!urlParts(base)) return `${/^https?:\/\//i.exec(url)?.[0] ?? ''}…`;
  const shown = redact(base, url);
  if (hash < 0) return shown;
  return `${shown}#${maskParams(masked.slice(hash + 1), FRAGMENT_CREDENTIAL)}`;
}

/**
 * `text` (an error message, a log line) with every credential masked: the password of any URL in it,
 * `password=…`-like pairs, and — given the store URL it concerns — that URL's own secrets wherever they appear,
 * as written or decoded (a driver may echo the password without its URL).
 *
 * @example
 * redact('AUTH S3CRET failed', 'redis://:S3CRET@cache:6379') // 'AUTH *** failed'
 */
export function redact(text: string, url?: string): string {
  // The URL's own secrets first, whole: a pattern stopping at a `;` or a quote would leave a tail of them.
  let masked = text;
  // At most the 64 longest, each one pass over the text: a URL of thousands of credential parameters (whose own
  // values the patterns below mask) must not make printing it quadratic.
  for (const secret of url === undefined ? [] : secretsOf(url).slice(0, 64)) masked = masked.split(secret).join('***');
  return maskParams(maskUserInfo(masked), QUERY_CREDENTIAL)
    .replace(AUTH_HEADER, '$1 ***')
    .replace(CREDENTIAL, (all, name: string, between: string) => {
      if (!secretName(name)) return all;
      const quote = /^["']/.exec(all.slice(name.length + between.length))?.[0] ?? '';
      return `${name}${between}${quote}***${quote}`;
    });
}

/**
 * The secrets of a URL, as written and decoded, longest first: its password and its credential parameters (a
 * query split at `&` only, as drivers split it: `;` and quotes belong to the value). One
 * shorter than 4 characters is left to the patterns: masking every `a` of a message would hide the message, not
 * the password.
 */
function secretsOf(url: string): string[] {
  const found = new Set<string>();
  const add = (value: string, decode: (value: string) => string) => {
    for (const form of [value, attempt(() => decode(value))]) if (form && form.length >= 4) found.add(form);
  };
  const start = url.indexOf('://');
  const userInfo = start < 0 ? '' : url.slice(start + 3, Math.max(start + 3, url.lastIndexOf('@')));
  if (userInfo.includes(':')) add(userInfo.slice(userInfo.indexOf(':') + 1), decodeURIComponent);
  // An http(s) URL's user name is a secret too (an API key as the basic-auth user): masked wherever it repeats.
  if (WEB.test(url)) add(userInfo.split(':')[0] ?? '', decodeURIComponent);
  const query = url.includes('?') ? url.slice(url.indexOf('?') + 1) : '';
  for (const pair of query.split('&')) {
    const [name = '', value = ''] = pair.split(/=(.*)/s);
    if (secretParam(name)) add(value, (v) => decodeURIComponent(v.replace(/\+/g, ' ')));
  }
  return [...found].sort((a, b) => b.length - a.length);
}

/** `scheme://[user[:password]@]hosts[/path][?query]` as written: undefined for anything a URL parser would misread. */
function urlParts(url: string): { hosts: string; query: string; username: string; password: string } | undefined {
  if (/[\s\p{Cc}]/u.test(url)) return undefined;
  const match = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)([^?#]*)(?:\?([^#]*))?$/i.exec(url);
  if (!match) return undefined;
  const [, authority = '', path = '', query = ''] = match;
  // An `@` past the authority is a password's `/` or `?` read as the end of the user info.
  if (path.includes('@') || query.includes('@')) return undefined;
  const at = authority.lastIndexOf('@');
  const userInfo = at < 0 ? '' : authority.slice(0, at);
  const colon = userInfo.includes(':') ? userInfo.indexOf(':') : userInfo.length;
  const username = attempt(() => decodeURIComponent(userInfo.slice(0, colon)));
  const password = attempt(() => decodeURIComponent(userInfo.slice(colon + 1)));
  if (username === undefined || password === undefined) return undefined;
  return { hosts: authority.slice(at + 1), query, username, password };
}

function parsesAsUrl(url: string): boolean {
  return attempt(() => new URL(url)) !== undefined && !urlParts(url)?.hosts.includes(',');
}

function seedNode(seed: string): SeedNode | undefined {
  const url = attempt(() => new URL(`redis://${seed}`));
  const port = Number(url?.port);
  if (!url?.hostname || url.username || url.password || url.pathname || !Number.isInteger(port) || port <= 0) return;
  return { host: url.hostname.replace(/^\[|\]$/g, ''), port };
}

/** Idem's own options taken out of the query; the rest, byte for byte, stays for the driver. */
function idemOptions(url: string, names: readonly string[]): { stripped: string; own: Map<string, string> } {
  const at = url.indexOf('?');
  if (at < 0) return { stripped: url, own: new Map() };
  const own = new Map<string, string>();
  const kept = url
    .slice(at + 1)
    .split('&')
    .filter((pair) => {
      const [name = '', value = ''] = [...new URLSearchParams(pair)][0] ?? [];
      if (names.includes(name)) own.set(name, value);
      return pair && !names.includes(name);
    });
  return { stripped: url.slice(0, at) + (kept.length ? `?${kept.join('&')}` : ''), own };
}

function attempt<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch {
    return undefined;
  }
}
