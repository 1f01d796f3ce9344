/**
 * The demo's configuration (issue 7, item 4): which settings may serve. Lab mode is loopback-only unless
 * `IDEM_LAB_ALLOW_REMOTE=1`; the well-known `sk_test_` keys exist in lab mode only, and outside it
 * `IDEM_API_KEYS` is required; a listener off loopback needs `IDEM_ALLOWED_HOSTS`. Every refusal is one line
 * that names the variable. (The same refusals as a process — stderr and exit code 2 — are in
 * test/security/lab-mode.test.ts and test/security/demo-hardening.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import { checkServable, isLoopback, loadConfig } from './config.js';

const refusal = (env: NodeJS.ProcessEnv): string => {
  try {
    checkServable(loadConfig(env));
  } catch (error) {
    return `${(error as Error).name}: ${(error as Error).message}`;
  }
  return 'serves';
};

describe('demo configuration: what may serve', () => {
  it('defaults: loopback, no keys outside lab mode, the test keys in lab mode, API limits, no metrics listener', () => {
    const production = loadConfig({});
    const lab = loadConfig({ IDEM_LAB: '1' });
    expect({
      host: production.host,
      keys: [...production.apiKeys],
      labKeys: [...lab.apiKeys],
      allowedHosts: production.allowedHosts,
      maxConnections: production.maxConnections,
      maxConnectionsPerAddress: production.maxConnectionsPerAddress,
      firstByteTimeoutMs: production.firstByteTimeoutMs,
      headersTimeoutMs: production.headersTimeoutMs,
      requestTimeoutMs: production.requestTimeoutMs,
      metricsPort: production.metricsPort,
      metricsHost: production.metricsHost,
      labAllowRemote: lab.labAllowRemote,
    }).toEqual({
      host: '127.0.0.1',
      keys: [],
      labKeys: [
        ['sk_test_alice', 'acct_alice'],
        ['sk_test_bob', 'acct_bob'],
      ],
      allowedHosts: undefined,
      maxConnections: 256,
      maxConnectionsPerAddress: 32,
      firstByteTimeoutMs: 2_000,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      metricsPort: undefined,
      metricsHost: '127.0.0.1',
      labAllowRemote: false,
    });
  });

  it('refuses each configuration that must not serve, in one line naming the variable', () => {
    const keys = { IDEM_API_KEYS: 'sk_live_1:acct_1' };
    expect({
      labRemote: refusal({ IDEM_LAB: '1', HOST: '0.0.0.0' }),
      labRemoteIpv6: refusal({ IDEM_LAB: '1', HOST: '::' }),
      noKeys: refusal({}),
      noKeysLabOff: refusal({ IDEM_LAB: '0' }),
      remoteNoHosts: refusal({ ...keys, HOST: '0.0.0.0' }),
      labRemoteAllowedNoHosts: refusal({ IDEM_LAB: '1', IDEM_LAB_ALLOW_REMOTE: '1', HOST: '0.0.0.0' }),
      metricsRemoteNoHosts: refusal({ ...keys, IDEM_METRICS_PORT: '9464', IDEM_METRICS_HOST: '0.0.0.0' }),
    }).toEqual({
      labRemote:
        'ConfigError: lab mode listens on loopback only, got HOST=0.0.0.0: use HOST=127.0.0.1, or set IDEM_LAB_ALLOW_REMOTE=1 to expose the lab on purpose.',
      labRemoteIpv6:
        'ConfigError: lab mode listens on loopback only, got HOST=::: use HOST=127.0.0.1, or set IDEM_LAB_ALLOW_REMOTE=1 to expose the lab on purpose.',
      noKeys:
        'ConfigError: IDEM_API_KEYS (--api-keys) is required outside lab mode (the sk_test_ keys are lab-only): give apikey:account pairs.',
      noKeysLabOff:
        'ConfigError: IDEM_API_KEYS (--api-keys) is required outside lab mode (the sk_test_ keys are lab-only): give apikey:account pairs.',
      remoteNoHosts:
        'ConfigError: HOST=0.0.0.0 is not loopback: set IDEM_ALLOWED_HOSTS to the Host names clients use (or * when a proxy checks Host).',
      labRemoteAllowedNoHosts:
        'ConfigError: HOST=0.0.0.0 is not loopback: set IDEM_ALLOWED_HOSTS to the Host names clients use (or * when a proxy checks Host).',
      metricsRemoteNoHosts:
        'ConfigError: IDEM_METRICS_HOST=0.0.0.0 is not loopback: set IDEM_ALLOWED_HOSTS to the Host names clients use (or * when a proxy checks Host).',
    });
  });

  it('serves what the operator asked for explicitly', () => {
    expect({
      lab: refusal({ IDEM_LAB: '1' }),
      labLocalhost: refusal({ IDEM_LAB: '1', HOST: 'localhost' }),
      labRemoteOnPurpose: refusal({
        IDEM_LAB: '1',
        IDEM_LAB_ALLOW_REMOTE: '1',
        HOST: '0.0.0.0',
        IDEM_ALLOWED_HOSTS: 'lab.example.test',
      }),
      production: refusal({ IDEM_API_KEYS: 'sk_live_1:acct_1' }),
      productionRemote: refusal({
        IDEM_API_KEYS: 'sk_live_1:acct_1',
        HOST: '0.0.0.0',
        IDEM_ALLOWED_HOSTS: 'api.example.test,10.0.0.5:4000',
      }),
      behindProxy: refusal({ IDEM_API_KEYS: 'sk_live_1:acct_1', HOST: '0.0.0.0', IDEM_ALLOWED_HOSTS: '*' }),
    }).toEqual({
      lab: 'serves',
      labLocalhost: 'serves',
      labRemoteOnPurpose: 'serves',
      production: 'serves',
      productionRemote: 'serves',
      behindProxy: 'serves',
    });
    expect(loadConfig({ IDEM_ALLOWED_HOSTS: ' API.example.test , [::1]:4000 ' }).allowedHosts).toEqual([
      'api.example.test',
      '[::1]:4000',
    ]);
  });

  it('refuses malformed new settings with a message naming the variable', () => {
    const error = (env: NodeJS.ProcessEnv) => {
      try {
        loadConfig(env);
        return 'accepted';
      } catch (caught) {
        return (caught as Error).message;
      }
    };
    expect([
      error({ IDEM_LAB_ALLOW_REMOTE: 'yes' }),
      error({ IDEM_ALLOWED_HOSTS: 'a.test,*' }),
      error({ IDEM_ALLOWED_HOSTS: 'a.test/x' }),
      error({ IDEM_MAX_CONNECTIONS: '0' }),
      error({ IDEM_HEADERS_TIMEOUT_MS: '40000' }),
      error({ IDEM_METRICS_PORT: '70000' }),
      error({ IDEM_MAX_CONNECTIONS_PER_ADDRESS: '0' }),
      error({ IDEM_MAX_CONNECTIONS_PER_ADDRESS: 'half' }),
      error({ IDEM_MAX_CONNECTIONS: '16', IDEM_MAX_CONNECTIONS_PER_ADDRESS: '17' }),
      error({ IDEM_FIRST_BYTE_TIMEOUT_MS: '1.5' }),
      error({ IDEM_FIRST_BYTE_TIMEOUT_MS: '10001' }),
      error({ IDEM_HEADERS_TIMEOUT_MS: '500', IDEM_FIRST_BYTE_TIMEOUT_MS: '2000' }),
    ]).toEqual([
      'IDEM_LAB_ALLOW_REMOTE (--lab-allow-remote) must be 1 or 0, got "yes".',
      'IDEM_ALLOWED_HOSTS (--allowed-hosts) is either * alone or a list of names, got "a.test,*".',
      'IDEM_ALLOWED_HOSTS (--allowed-hosts) must be names or name:port separated by commas, got "a.test/x".',
      'IDEM_MAX_CONNECTIONS (--max-connections) must be an integer ≥ 1, got "0".',
      'IDEM_HEADERS_TIMEOUT_MS (--headers-timeout-ms) must not exceed IDEM_REQUEST_TIMEOUT_MS (30000), got 40000.',
      'IDEM_METRICS_PORT (--metrics-port) must be at most 65535, got 70000.',
      'IDEM_MAX_CONNECTIONS_PER_ADDRESS (--max-connections-per-address) must be an integer ≥ 1, got "0".',
      'IDEM_MAX_CONNECTIONS_PER_ADDRESS (--max-connections-per-address) must be an integer ≥ 1, got "half".',
      'IDEM_MAX_CONNECTIONS_PER_ADDRESS (--max-connections-per-address) must not exceed IDEM_MAX_CONNECTIONS (16), got 17.',
      'IDEM_FIRST_BYTE_TIMEOUT_MS (--first-byte-timeout-ms) must be an integer ≥ 1, got "1.5".',
      'IDEM_FIRST_BYTE_TIMEOUT_MS (--first-byte-timeout-ms) must not exceed IDEM_HEADERS_TIMEOUT_MS (10000), got 10001.',
      'IDEM_FIRST_BYTE_TIMEOUT_MS (--first-byte-timeout-ms) must not exceed IDEM_HEADERS_TIMEOUT_MS (500), got 2000.',
    ]);
    // Unset, the share follows the cap and the first-byte timeout never exceeds the headers timeout; flags win.
    const small = loadConfig({ IDEM_MAX_CONNECTIONS: '8', IDEM_HEADERS_TIMEOUT_MS: '500' });
    const flags = loadConfig({ IDEM_MAX_CONNECTIONS_PER_ADDRESS: '4' }, [
      '--max-connections-per-address',
      '256',
      '--first-byte-timeout-ms',
      '750',
    ]);
    expect([
      small.maxConnectionsPerAddress,
      small.firstByteTimeoutMs,
      flags.maxConnectionsPerAddress,
      flags.firstByteTimeoutMs,
    ]).toEqual([8, 500, 256, 750]);
  });

  it('loopback is localhost, 127.0.0.0/8 and ::1, nothing else', () => {
    const hosts = [
      'localhost',
      'LOCALHOST',
      '127.0.0.1',
      '127.1.2.3',
      '::1',
      '[::1]',
      '0.0.0.0',
      '::',
      '10.0.0.1',
      'localhost.example',
      '128.0.0.1',
    ];
    expect(hosts.filter(isLoopback)).toEqual(['localhost', 'LOCALHOST', '127.0.0.1', '127.1.2.3', '::1', '[::1]']);
  });
});

describe('IDEM_API_KEYS: whitespace around and inside the pairs', () => {
  // `Bearer (\S+)` can never send "sk_live_1 ": the second pair is a dead key, and sk_live_1 answers as acct_a
  // although the operator last gave it acct_b — the repeat the refusal is for, missed by `pair.trim()` alone.
  it('is refused as a repeat, by position', () => {
    const message = (pair: number, of: number, problem: string) =>
      `ConfigError: IDEM_API_KEYS (--api-keys) must be apikey:account pairs separated by commas; pair ${pair} of ${of} ${problem}.`;
    expect([
      refusal({ IDEM_API_KEYS: 'sk_live_1:acct_a, sk_live_1 :acct_b' }),
      refusal({ IDEM_API_KEYS: 'sk_live_1:acct_a,sk_live_2:acct_b,sk live_3:acct_c' }),
    ]).toEqual([message(2, 2, 'repeats the API key of pair 1'), message(3, 3, 'has whitespace inside its API key')]);
  });

  it('whitespace around the colon is not part of the key or the account', () => {
    const { apiKeys } = loadConfig({ IDEM_API_KEYS: ' sk_live_1 : acct_a ,sk_live_2:\tacct_b' });
    expect([...apiKeys]).toEqual([
      ['sk_live_1', 'acct_a'],
      ['sk_live_2', 'acct_b'],
    ]);
  });
});
