/**
 * @module Encryption at rest (docs/SECURITY.md: Sealed responses): a store wrapper that seals every stored
 * response — body and header values — with AES-GCM through WebCrypto, and opens it wherever a record is read.
 */
import { configError, IdempotencyError } from './errors.js';
import type {
  ClaimResult,
  CompleteRequest,
  IdempotencyRecord,
  IdempotencyStore,
  LocalTransactionRequest,
  LocalTransactionResult,
  Outcome,
  StoredResponse,
} from './record.js';

/** One AES-GCM key and the id stored with every response it seals. */
export interface SealingKey {
  /** 1–64 visible ASCII characters, unique among the keys; stored in plain text with each sealed response. */
  readonly id: string;
  /** An AES-GCM `CryptoKey` (the newest key needs `encrypt` and `decrypt`, older ones `decrypt`), or 32 raw bytes (AES-256). */
  readonly key: CryptoKey | Uint8Array;
}

export interface SealedOptions {
  /** Newest first: the first key seals every new response; every key opens the responses sealed with it. */
  readonly keys: readonly SealingKey[];
  /**
   * Open records written before sealing was turned on (a response that is not a sealed envelope) as they are.
   * Default false: such a record is refused like a tampered one. Turn it on for one record TTL while you migrate.
   */
  readonly acceptPlain?: boolean;
  /**
   * Write new responses in plain text, and open both sealed and plain ones: the first step of turning sealing on
   * across several instances (every instance can read a sealed record before any writes one), and the way to
   * turn it off. Default false.
   */
  readonly writePlain?: boolean;
}

/** Why a stored response could not be opened. */
export type SealedRecordReason = 'unknown-key' | 'not-authentic' | 'not-sealed' | 'malformed';

/**
 * A stored response that cannot be opened: sealed with a key id not in `keys`, failing authentication (changed
 * since it was sealed, or moved to another record), or not sealed at all. The store call rejects with it, so the
 * engine answers `STORE_UNAVAILABLE` (HTTP 503) and the work does not run.
 */
export class SealedRecordError extends Error {
  override readonly name = 'SealedRecordError';
  readonly reason: SealedRecordReason;
  /** The key id the envelope names, when it is one a key could have (1–64 visible ASCII characters). */
  readonly keyId: string | null;

  constructor(reason: SealedRecordReason, keyId: string | null, detail: string, cause?: unknown) {
    super(`Idem could not open a sealed response: ${detail}`, cause === undefined ? {} : { cause });
    this.reason = reason;
    this.keyId = keyId;
  }
}

/** `\0idm`, then the format's version: what every sealed body starts with. */
const MAGIC = [0x00, 0x69, 0x64, 0x6d] as const;
const VERSION = 1;
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** Magic, version, key id length, IV, tag, and the headers' length inside the plaintext: what sealing adds, plus the key id. */
const FIXED_OVERHEAD = MAGIC.length + 1 + 1 + IV_BYTES + TAG_BYTES + 4;
const KEY_ID = /^[\x21-\x7e]{1,64}$/;

/** The bytes a sealed response takes beyond the response's own weight (body plus headers as JSON), for key id `keyId`. */
export function sealOverhead(keyId: string): number {
  return FIXED_OVERHEAD + keyId.length;
}

interface Entry {
  readonly id: string;
  /** The envelope's header for this key: magic, version, id length, id. Also the start of the additional data. */
  readonly header: Uint8Array;
  readonly key: () => Promise<CryptoKey>;
}

/**
 * Wraps `store` so that every response it stores is sealed with AES-GCM and opened again when read (claim's
 * record in the way, `get`, `list`, `runLocal`). Replays stay byte-identical. Sealed: the body and the headers
 * (names and values, as one blob). Plain: the response's status code and every other field of the record (scope,
 * key, fingerprint, id, times, `resultId`). Each seal has a fresh random 12-byte IV and authenticates the
 * record's `pk` (scope and key) and the status code, so a sealed response moved to another record does not open.
 * A response that does not open — a key id not in `keys`, a changed byte, a moved envelope — makes the store call
 * reject with {@link SealedRecordError}: the engine answers 503 and runs nothing. `maxResponseBytes` shrinks by
 * the envelope's overhead. `runLocal` is kept only where its work may be asynchronous (PostgreSQL): sealing is.
 * `name` and `roundTrips` are the wrapped store's; call its own extras (`migrate()`, `load()`) on it directly.
 * Rotating keys and turning sealing on across instances: docs/SECURITY.md, Sealed responses.
 *
 * @example
 * import { createEngine, sealed } from 'idem'
 * const store = sealed(postgresStore({ pool }), {
 *   keys: [
 *     { id: '2026-05', key: Buffer.from(process.env.IDEM_SEAL_KEY_2026_05!, 'base64') }, // seals and opens
 *     { id: '2026-01', key: Buffer.from(process.env.IDEM_SEAL_KEY_2026_01!, 'base64') }, // opens only
 *   ],
 * })
 * const engine = createEngine({ store })
 */
export function sealed<Tx>(store: IdempotencyStore<Tx>, options: SealedOptions): IdempotencyStore<Tx> {
  if (typeof store?.claim !== 'function') throw configError('store', 'an IdempotencyStore');
  const { keys, acceptPlain = false, writePlain = false } = options ?? ({} as SealedOptions);
  const webCrypto = (globalThis as { crypto?: Crypto }).crypto;
  const subtle = webCrypto?.subtle;
  if (webCrypto === undefined || subtle === undefined)
    throw configError('sealed', 'used on a runtime with WebCrypto (globalThis.crypto.subtle)');
  if (typeof acceptPlain !== 'boolean') throw configError('acceptPlain', 'a boolean', acceptPlain);
  if (typeof writePlain !== 'boolean') throw configError('writePlain', 'a boolean', writePlain);
  const list: readonly SealingKey[] = Array.isArray(keys) ? keys : [];
  if (list.length === 0) throw configError('keys', 'a non-empty array of { id, key }, newest first');
  const entries: Entry[] = [];
  list.forEach((entry, i) => {
    const id = (entry as Partial<SealingKey> | null)?.id;
    if (typeof id !== 'string' || !KEY_ID.test(id)) {
      throw new IdempotencyError(
        'CONFIG_INVALID',
        `Expected \`keys[${i}].id\` to be 1–64 visible ASCII characters, got ${shownKeyId(id)}.`,
      );
    }
    if (entries.some((e) => e.id === id)) throw configError(`keys[${i}].id`, 'unique among the keys', id);
    const header = Uint8Array.from([...MAGIC, VERSION, id.length, ...[...id].map((c) => c.charCodeAt(0))]);
    entries.push({ id, header, key: keyOf(subtle, entry.key, `keys[${i}].key`, i === 0) });
  });
  const [newest] = entries as [Entry, ...Entry[]];
  const byId = new Map(entries.map((entry) => [entry.id, entry]));
  const overhead = sealOverhead(newest.id);

  const seal = async (pk: string, response: StoredResponse): Promise<StoredResponse> => {
    const headerText =
      response.headers.length === 0 ? new Uint8Array(0) : UTF8.encode(JSON.stringify(response.headers));
    const plain = new Uint8Array(4 + headerText.byteLength + response.body.byteLength);
    new DataView(plain.buffer).setUint32(0, headerText.byteLength);
    plain.set(headerText, 4);
    plain.set(response.body, 4 + headerText.byteLength);
    const iv = webCrypto.getRandomValues(new Uint8Array(IV_BYTES));
    const additionalData = aad(newest.header, response.status, pk);
    const sealedBytes = await subtle.encrypt({ name: 'AES-GCM', iv, additionalData }, await newest.key(), plain);
    const body = new Uint8Array(newest.header.byteLength + IV_BYTES + sealedBytes.byteLength);
    body.set(newest.header, 0);
    body.set(iv, newest.header.byteLength);
    body.set(new Uint8Array(sealedBytes), newest.header.byteLength + IV_BYTES);
    return { status: response.status, headers: [], body };
  };
  const sealOutcome = async (pk: string, outcome: Outcome): Promise<Outcome> =>
    outcome.response === null || writePlain ? outcome : { ...outcome, response: await seal(pk, outcome.response) };

  const open = opener(subtle, byId, acceptPlain || writePlain);
  const opened = async (result: ClaimResult): Promise<ClaimResult> =>
    result.kind === 'claimed'
      ? { ...result, record: await open(result.record) }
      : { kind: 'existing', record: await open(result.record) };

  const runLocal = store.runLocal?.bind(store);
  const local =
    runLocal !== undefined && store.localWork === 'async'
      ? {
          localWork: 'async' as const,
          runLocal: async (request: LocalTransactionRequest<Tx>): Promise<LocalTransactionResult> => {
            const result = await runLocal({
              ...request,
              work: async (tx, record) => {
                const outcome = await request.work(tx, await open(record));
                return outcome === null ? null : sealOutcome(request.pk, outcome);
              },
            });
            return result.kind === 'rolled-back' ? result : { kind: result.kind, record: await open(result.record) };
          },
        }
      : {};

  return {
    name: store.name,
    get roundTrips() {
      return store.roundTrips;
    },
    ...(store.maxResponseBytes === undefined
      ? {}
      : { maxResponseBytes: Math.max(0, store.maxResponseBytes - overhead) }),
    ...(store.acceptsEffects === undefined ? {} : { acceptsEffects: store.acceptsEffects }),
    claim: async (request) => opened(await store.claim(request)),
    complete: async (request: CompleteRequest<Tx>) =>
      store.complete({ ...request, outcome: await sealOutcome(request.pk, request.outcome) }),
    renew: (request) => store.renew(request),
    release: (request) => store.release(request),
    get: async (pk) => {
      const record = await store.get(pk);
      return record === null ? null : open(record);
    },
    sweep: (request) => store.sweep(request),
    list: async (request) => Promise.all((await store.list(request)).map(open)),
    close: () => store.close(),
    ...local,
  };
}

/**
 * The reader of stored responses: opens a sealed one with the key its envelope names, or rejects with
 * {@link SealedRecordError}; while `migrating` (`acceptPlain` or `writePlain`), a plain one is returned as it is.
 */
function opener(subtle: SubtleCrypto, byId: ReadonlyMap<string, Entry>, migrating: boolean) {
  // While plain records are accepted, one whose body starts like an envelope is still read as one, and refused when
  // it does not open: it cannot be told from a sealed record whose key was retired too early, or that was moved or
  // changed, and replaying those bytes would be a wrong answer (docs/SECURITY.md, Sealed responses). The message
  // says so, for the operator who finds such a record.
  const refused = (reason: SealedRecordReason, keyId: string | null, detail: string, cause?: unknown) =>
    new SealedRecordError(reason, keyId, migrating ? `${detail}${MIGRATING}` : detail, cause);
  return async (record: IdempotencyRecord): Promise<IdempotencyRecord> => {
    const { response, pk } = record;
    if (response === null) return record;
    // A view on the store's bytes; WebCrypto reads it as it is (bodies never live in a SharedArrayBuffer).
    const body = response.body as Uint8Array<ArrayBuffer>;
    const isEnvelope = response.headers.length === 0 && MAGIC.every((byte, i) => body[i] === byte);
    if (!isEnvelope) {
      if (migrating) return record;
      throw new SealedRecordError('not-sealed', null, 'the record holds a response that is not sealed.');
    }
    const version = body[MAGIC.length];
    if (version !== VERSION) {
      throw refused('malformed', null, `the envelope's format version is ${version ?? 'missing'}.`);
    }
    const idLength = body[MAGIC.length + 1] ?? 0;
    const headerLength = MAGIC.length + 2 + idLength;
    if (body.byteLength < headerLength + IV_BYTES + TAG_BYTES + 4) {
      throw refused('malformed', null, `the envelope is too short (${body.byteLength} bytes).`);
    }
    const idBytes = body.subarray(MAGIC.length + 2, headerLength);
    const id = String.fromCharCode(...idBytes);
    const shownId = KEY_ID.test(id) ? id : null;
    const entry = shownId === null ? undefined : byId.get(shownId);
    if (entry === undefined) {
      const named = shownId === null ? 'an invalid key id' : `key id "${shownId}"`;
      throw refused(
        'unknown-key',
        shownId,
        `it was sealed with ${named}, which is not among \`keys\` (keep a retired key for reading until its records expire).`,
      );
    }
    let plain: Uint8Array;
    try {
      const iv = body.subarray(headerLength, headerLength + IV_BYTES);
      const additionalData = aad(entry.header, response.status, pk);
      const data = body.subarray(headerLength + IV_BYTES);
      plain = new Uint8Array(await subtle.decrypt({ name: 'AES-GCM', iv, additionalData }, await entry.key(), data));
    } catch (error) {
      throw refused(
        'not-authentic',
        entry.id,
        `authentication failed with key id "${entry.id}": the envelope, or the record's key or status code, changed since it was sealed.`,
        error,
      );
    }
    // Authenticated: these are the bytes `seal` wrote, so their framing holds.
    const headerText = new DataView(plain.buffer, plain.byteOffset).getUint32(0);
    const headers =
      headerText === 0
        ? []
        : (JSON.parse(UTF8_STRICT.decode(plain.subarray(4, 4 + headerText))) as Array<[string, string]>);
    return { ...record, response: { status: response.status, headers, body: plain.subarray(4 + headerText) } };
  };
}

/** Added to a refusal while plain records are accepted. */
const MIGRATING =
  ' Plain records are accepted, but this one starts like a sealed envelope and is refused as one (see docs/SECURITY.md, Sealed responses).';

/** The characters of a bad key id an error message shows: enough to find it, too few to print a secret pasted there. */
const SHOWN_ID_CHARACTERS = 8;

/**
 * A bad key id as an error shows it: a string's first {@link SHOWN_ID_CHARACTERS} characters, quoted, with every
 * character outside printable ASCII (and `"`, `\`) escaped as `\u{…}`, and its length when cut; else its type.
 * The id may be anything (a key pasted in the wrong field, a megabyte, terminal escapes): the message stays one
 * short line that reveals little of it.
 */
function shownKeyId(id: unknown): string {
  if (typeof id !== 'string') return id === null ? 'null' : `a value of type ${typeof id}`;
  let shown = '';
  let count = 0;
  for (const c of id) {
    if (++count > SHOWN_ID_CHARACTERS) return `"${shown}…" (${id.length} UTF-16 units)`;
    shown += /^[\x20-\x7e]$/.test(c) && c !== '"' && c !== '\\' ? c : `\\u{${c.codePointAt(0)?.toString(16)}}`;
  }
  return `"${shown}"`;
}

const UTF8 = new TextEncoder();
const UTF8_STRICT = new TextDecoder('utf-8', { fatal: true });

/** What each seal authenticates besides the plaintext: the envelope's header, the status code, and the record's pk. */
function aad(header: Uint8Array, status: number, pk: string): Uint8Array<ArrayBuffer> {
  const pkBytes = UTF8.encode(pk);
  const data = new Uint8Array(header.byteLength + 2 + pkBytes.byteLength);
  data.set(header, 0);
  new DataView(data.buffer).setUint16(header.byteLength, status);
  data.set(pkBytes, header.byteLength + 2);
  return data;
}

/**
 * The key of one entry, imported on first use (raw bytes are copied now, so a later change to the caller's buffer
 * changes nothing). A wrong key is refused here without its bytes in the message.
 */
function keyOf(subtle: SubtleCrypto, key: unknown, name: string, seals: boolean): () => Promise<CryptoKey> {
  if (key instanceof Uint8Array) {
    if (key.byteLength !== 32) {
      throw new IdempotencyError(
        'CONFIG_INVALID',
        `Expected \`${name}\` to be 32 raw bytes (AES-256) or an AES-GCM CryptoKey, got ${key.byteLength} bytes.`,
      );
    }
    // A copy into memory of its own: `slice()` of a Node Buffer is a view on the caller's memory, so a caller that
    // wipes its key buffer once the store is made (key hygiene) would then seal with 32 zero bytes.
    const raw = new Uint8Array(key);
    let imported: Promise<CryptoKey> | undefined;
    return () => (imported ??= subtle.importKey('raw', raw, { name: 'AES-GCM' }, false, ['encrypt', 'decrypt']));
  }
  const candidate = key as Partial<CryptoKey> | null;
  const usages = Array.isArray(candidate?.usages) ? candidate.usages : [];
  const needed: KeyUsage[] = seals ? ['encrypt', 'decrypt'] : ['decrypt'];
  if (
    typeof candidate !== 'object' ||
    candidate === null ||
    candidate.type !== 'secret' ||
    candidate.algorithm?.name !== 'AES-GCM' ||
    !needed.every((usage) => usages.includes(usage))
  ) {
    throw new IdempotencyError(
      'CONFIG_INVALID',
      `Expected \`${name}\` to be 32 raw bytes or an AES-GCM CryptoKey with the usages ${needed.join(' and ')}.`,
    );
  }
  const ready = Promise.resolve(candidate as CryptoKey);
  return () => ready;
}
