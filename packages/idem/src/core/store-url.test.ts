/**
 * Store URLs: every credential form is masked, exactly; a URL that does not parse shows its scheme only; a Redis
 * Cluster's password never becomes part of a seed host (which would be sent to a DNS lookup).
 */
import { describe, expect, it } from 'vitest';
import { parseStoreUrl, redact, redactUrl } from './store-url.js';

const refusal = (raw: string): string => {
  try {
    parseStoreUrl(raw, 'IDEM_STORE');
  } catch (error) {
    return `${(error as { code?: string }).code}: ${(error as Error).message}`;
  }
  return 'accepted';
};

/**
 * A URL as given, then as printed: user info (`user:pw@`, `:pw@`, a password holding `@`, percent-encoded, a user
 * name equal to the password), query credentials, a cluster's seed list, opaque forms; then URLs that do not parse
 * (`#`, `/`, `?` in the password, a bad escape, no `//`, no scheme), shown as their scheme only. Last, http(s) URLs
 * (the probe's target and its count URL): the whole user info (an API key is often the user name), and every
 * credential parameter of the query and the fragment.
 */
const SHOWN = `
postgres://app:S3CRET@db:5432/pay        postgres://app:***@db:5432/pay
redis://:S3CRET@cache:6379/0             redis://:***@cache:6379/0
redis://:S3@CRET@cache:6379              redis://:***@cache:6379
mysql://root:S3%23CRET@db:3306/test      mysql://root:***@db:3306/test
postgres://S3CRET:S3CRET@db/pay          postgres://***:***@db/pay
postgres://app@db/pay?password=S3CRET&sslmode=require   postgres://app@db/pay?password=***&sslmode=require
postgres://db/p?sslpassword=a&pass=b&pwd=c&secret=d&token=e&apiKey=f&sslkey=g&auth=h   postgres://db/p?sslpassword=***&pass=***&pwd=***&secret=***&token=***&apiKey=***&sslkey=***&auth=***
dynamodb://db:8000?secretAccessKey=a&accessKeyId=b&sessionToken=c&X-Amz-Signature=d&X-Amz-Credential=e   dynamodb://db:8000?secretAccessKey=***&accessKeyId=***&sessionToken=***&X-Amz-Signature=***&X-Amz-Credential=***
redis-cluster://:S3CRET@a:7000,b:7001?password=S3CRET   redis-cluster://:***@a:7000,b:7001?password=***
postgres://app@db:5432/pay?schema=idem   postgres://app@db:5432/pay?schema=idem
dynamodb:local?table=t&token=x           dynamodb:local?table=t&token=***
sqlite:./.idem/idem.db                   sqlite:./.idem/idem.db
redis://:S3#CRET@cache:6379              redis://…
postgres://app:S3/CRET@db/pay            postgres://…
redis://u:12?CRET@cache                  redis://…
postgres://u:12#34@db/pay                postgres://…
mysql://root:S3%zzCRET@db/test           mysql://…
postgres:app:S3CRET@db                   postgres:…
app:S3CRET@db                            app:…
http://user:Zq9Secret@127.0.0.1:1/v1/charges          http://***@127.0.0.1:1/v1/charges
https://sk_live_Zq9Secret:@api.example/v1/charges     https://***@api.example/v1/charges
https://sk_live_Zq9Secret@api.example/v1              https://***@api.example/v1
http://127.0.0.1:1/v1/charges?api_key=Zq9Secret       http://127.0.0.1:1/v1/charges?api_key=***
http://u:Zq9Secret@127.0.0.1:1/b?token=Zq9Secret      http://***@127.0.0.1:1/b?token=***
https://h/x?password=a&apikey=b&secret=c&signature=d&auth=e&access_token=f&page=2   https://h/x?password=***&apikey=***&secret=***&signature=***&auth=***&access_token=***&page=2
https://h/x?X-Amz-Signature=abcdef&X-Amz-Credential=AKIA/x&a=b   https://h/x?X-Amz-Signature=***&X-Amz-Credential=***&a=b
https://h/cb#access_token=Zq9Secret&state=xyz&token_type=bearer   https://h/cb#access_token=***&state=xyz&token_type=***
https://h/p?token=Zq9Secret#top                       https://h/p?token=***
http://127.0.0.1:4000/v1/charges?limit=3              http://127.0.0.1:4000/v1/charges?limit=3
http://user:p@ss/word@h/x                             http://***@h/x
postgres://u@h/db?p%61ssword=S3CRETPW1                postgres://u@h/db?p%61ssword=***
redis://127.0.0.1:6379/5?p%61ssword=S3CRETPW3         redis://127.0.0.1:6379/5?p%61ssword=***
https://api.example/x?t%6Fken=SECRET&api%5fk%65y=K&page=2   https://api.example/x?t%6Fken=***&api%5fk%65y=***&page=2
https://apiuser:S3CR#ETPW@api.example/v1/charges      https://…
https://u:S3CR#ET/99@api.example/v1/charges           https://…
https://user:PW#sec/ret@api.example/x                 https://…
https://u:S3?CR/ET#X@api.example/                     https://…
https://sk_live_Zq9#X@host/v1                         https://***@host/v1
https://h/v1?api_key=AB#CD                            https://h/v1?api_key=***
https://h/cb?x=1#access_token=Zq9Secret&state=xyz     https://h/cb?x=1#access_token=***&state=xyz
`;

describe('redactUrl: every credential form, masked', () => {
  it.each(
    SHOWN.trim()
      .split('\n')
      .map((line) => line.split(/\s+/)),
  )('%s → %s', (url, shown) => {
    expect(redactUrl(url)).toBe(shown);
  });

  it('redact(text, url) masks the user name of an http(s) URL wherever a message repeats it', () => {
    const url = 'https://sk_live_Zq9Secret:@api.example/v1';
    expect(redact('401 for sk_live_Zq9Secret at https://sk_live_Zq9Secret:@api.example/v1', url)).toBe(
      '401 for *** at https://***:***@api.example/v1',
    );
  });

  it('a query password holding ; \' or " is masked to the next &, as the driver reads it', () => {
    expect(redactUrl('mysql://root@127.0.0.1:3306/nodb?password=AB;TAILSECRET')).toBe(
      'mysql://root@127.0.0.1:3306/nodb?password=***',
    );
    expect(redactUrl("postgres://app@db/pay?password=AB'TAILSECRET&sslmode=require")).toBe(
      'postgres://app@db/pay?password=***&sslmode=require',
    );
    expect(redactUrl('redis://cache:6379/0?password=AB"TAILSECRET')).toBe('redis://cache:6379/0?password=***');
    expect(redactUrl('redis://cache:6379?db=1;password=x&token=A;B\'C"D&x=1')).toBe(
      'redis://cache:6379?db=1;password=***&token=***&x=1',
    );
    expect(parseStoreUrl('postgres://app@db/pay?password=AB;TAILSECRET&schema=idem').shown).toBe(
      'postgres://app@db/pay?password=***',
    );
  });

  it('a password with a space does not parse either', () => {
    expect(redactUrl('mysql://root:S3 CRET@db/test')).toBe('mysql://…');
  });
});

describe('redact: credentials in any text, and the known password wherever a driver repeats it', () => {
  it('masks URLs, name=value and JSON pairs in a message', () => {
    expect(
      redact(
        'connect redis://:a1@h:6379 and postgres://u:b2@h/db failed; DSN host=h password=c3 sslpassword=\'d 4\' {"token": "e5"}',
      ),
    ).toBe(
      'connect redis://:***@h:6379 and postgres://u:***@h/db failed; DSN host=h password=*** sslpassword=\'***\' {"token": "***"}',
    );
  });

  it("masks the store URL's own secrets, as written and decoded", () => {
    const url = 'postgres://S3CRET:p%40ss%2Fword@db/pay?password=Q%2BUERY&schema=idem';
    expect(redact('role "S3CRET" does not exist; AUTH p@ss/word p%40ss%2Fword Q+UERY Q%2BUERY', url)).toBe(
      'role "S3CRET" does not exist; AUTH *** *** *** ***',
    );
    expect(redact('role "S3CRET" failed', 'postgres://S3CRET:S3CRET@db/pay')).toBe('role "***" failed');
  });

  it("masks a store URL's query password holding ; ' or \" wherever a driver repeats it, before the patterns", () => {
    const url = 'mysql://root@127.0.0.1:3306/nodb?password=AB;TAILSECRET';
    expect(redact(`password AB;TAILSECRET refused by ${url}`, url)).toBe(
      'password *** refused by mysql://root@127.0.0.1:3306/nodb?password=***',
    );
    expect(
      redact("auth AB'TAILSECRET failed; DSN password=AB'TAILSECRET", "postgres://db/p?password=AB'TAILSECRET"),
    ).toBe('auth *** failed; DSN password=***');
    expect(redact('url redis://h?password=AB"TAILSECRET x=1')).toBe('url redis://h?password=*** x=1');
  });

  it('leaves a message without credentials as it was', () => {
    const text = 'connect ECONNREFUSED 127.0.0.1:5432; Key (pk)=(abc) already exists; postgres://db:5432/pay';
    expect(redact(text, 'postgres://app@db:5432/pay?schema=idem')).toBe(text);
  });
});

describe('parseStoreUrl', () => {
  it("a Redis Cluster: the seeds are host and port only, the password goes to every node's AUTH", () => {
    expect(parseStoreUrl('redis-cluster://:S3CRET@cache:7000')).toEqual({
      kind: 'redis-cluster',
      nodes: [{ host: 'cache', port: 7000 }],
      redisOptions: { password: 'S3CRET' },
      options: {},
      shown: 'redis-cluster://:***@cache:7000',
    });
    expect(parseStoreUrl('redis-cluster://ops:p%40ss@a:7000,[::1]:7001?prefix=t:&replicas=1&tls=x')).toEqual({
      kind: 'redis-cluster',
      nodes: [
        { host: 'a', port: 7000 },
        { host: '::1', port: 7001 },
      ],
      redisOptions: { tls: 'x', username: 'ops', password: 'p@ss' },
      options: { prefix: 't:', replicas: 1 },
      shown: 'redis-cluster://ops:***@a:7000,[::1]:7001?tls=x',
    });
  });

  it("takes Idem's own options out of the query and leaves the driver's, byte for byte", () => {
    expect(parseStoreUrl('postgres://app@db/pay?sslmode=require&schema=idem&password=S%20C&table=t')).toEqual({
      kind: 'postgres',
      connectionString: 'postgres://app@db/pay?sslmode=require&password=S%20C',
      options: { schema: 'idem', table: 't' },
      shown: 'postgres://app@db/pay?sslmode=require&password=***',
    });
    expect(parseStoreUrl('redis://:S3CRET@cache:6379/2?prefix=p:&replicaTimeoutMs=500')).toEqual({
      kind: 'redis',
      url: 'redis://:S3CRET@cache:6379/2',
      options: { prefix: 'p:', replicaTimeoutMs: 500 },
      shown: 'redis://:***@cache:6379/2',
    });
    expect(parseStoreUrl('mysql://root:S3CRET@db:3306/test?table=t')).toEqual({
      kind: 'mysql',
      uri: 'mysql://root:S3CRET@db:3306/test',
      options: { table: 't' },
      shown: 'mysql://root:***@db:3306/test',
    });
    expect(parseStoreUrl('dynamodb://127.0.0.1:8000?table=t&region=eu-west-1')).toEqual({
      kind: 'dynamodb',
      client: {
        endpoint: 'http://127.0.0.1:8000',
        region: 'eu-west-1',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      },
      options: { table: 't' },
      shown: 'dynamodb://127.0.0.1:8000',
    });
    expect(parseStoreUrl('dynamodb://dynamodb.eu-west-1.amazonaws.com')).toMatchObject({
      client: { endpoint: 'https://dynamodb.eu-west-1.amazonaws.com' },
    });
    expect(parseStoreUrl('dynamodb:local?table=t')).toEqual({
      kind: 'dynamodb',
      options: { table: 't' },
      shown: 'dynamodb:local',
    });
    expect(parseStoreUrl('sqlite:./x.db')).toEqual({ kind: 'sqlite', path: './x.db', shown: 'sqlite:./x.db' });
    expect(parseStoreUrl('memory:')).toEqual({ kind: 'memory', shown: 'memory:' });
  });

  it('refuses with the URL redacted, or its scheme only when it does not parse', () => {
    const invalid = (scheme: string) =>
      `CONFIG_INVALID: IDEM_STORE is not a valid store URL (${scheme}://…): percent-encode any @ # / ? : % or space in its user name and password.`;
    expect(refusal('redis://:S3#CRET@cache:6379')).toBe(invalid('redis'));
    expect(refusal('postgres://app:S3/CRET@db/pay')).toBe(invalid('postgres'));
    expect(refusal('redis-cluster://:S3/CRET@a:7000')).toBe(invalid('redis-cluster'));
    expect(refusal('redis-cluster://:S3CRET@a')).toBe(
      'CONFIG_INVALID: IDEM_STORE redis-cluster://host:port[,host:port…] needs host:port pairs, got "redis-cluster://:***@a".',
    );
    expect(refusal('mysql://root:S3CRET@db:3306')).toBe(
      'CONFIG_INVALID: IDEM_STORE mysql://user@host:3306/db needs a database, got "mysql://root:***@db:3306".',
    );
    expect(refusal('redis://cache?replicas=two')).toBe(
      'CONFIG_INVALID: IDEM_STORE ?replicas= must be a whole number, got "two".',
    );
    expect(refusal('sqlite:')).toBe(
      'CONFIG_INVALID: IDEM_STORE sqlite:<path> needs a path, e.g. sqlite:./.idem/idem.db',
    );
    expect(refusal('ftp://u:S3CRET@host')).toMatch(
      /^CONFIG_INVALID: IDEM_STORE must be one of sqlite:<path>, memory:, .*; got "ftp:\/\/u:\*\*\*@host"\.$/,
    );
    expect(refusal('postgres:app:S3CRET@db')).toMatch(/; got "postgres:…"\.$/);
  });
});
