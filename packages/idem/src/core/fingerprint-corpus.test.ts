/**
 * Stored records keep the fingerprint of their request: a changed canonical form turns every retry of a stored key
 * into a mismatch. These are the fingerprints the implementation before the byte-level rewrite (commit 993127f)
 * gave for a corpus of bodies — small and 1 MiB, canonicalised and hashed raw — pinned as exact hex.
 */
import { describe, expect, it } from 'vitest';
import { fingerprint } from './fingerprint.js';

const MiB = 1_048_576;
const utf8 = (text: string) => new TextEncoder().encode(text);
const bytes = (...parts: Array<string | number[]>) =>
  Uint8Array.from(parts.flatMap((part) => (typeof part === 'string' ? [...utf8(part)] : part)));

/** A JSON array of `item` repeated, as long as fits in 1 MiB. */
const fill = (item: string) =>
  `[${Array<string>(Math.floor((MiB - 2) / (utf8(item).length + 1)))
    .fill(item)
    .join(',')}]`;

/** A fixed shuffle (a linear congruential generator), so the corpus is the same on every run. */
function shuffled<T>(items: T[]): T[] {
  let seed = 12_345;
  for (let i = items.length - 1; i > 0; i--) {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    const j = seed % (i + 1);
    [items[i], items[j]] = [items[j] as T, items[i] as T];
  }
  return items;
}

const keys = (count: number, name: (i: number) => string) =>
  shuffled(Array.from({ length: count }, (_, i) => `"${name(i)}":${i}`)).join(',');

/** Objects `depth` deep, each with its members out of order around the next one. */
const deepUnordered = (depth: number, inner: string) => `${'{"b":0,"a":'.repeat(depth)}${inner}${'}'.repeat(depth)}`;

const SMALL: Record<string, string | Uint8Array> = {
  'a charge': '{"amount":500,"currency":"usd","source":"tok_visa","metadata":{"order":"1234"}}',
  'a charge, reordered with whitespace':
    ' {\n\t"source" : "tok_visa",\r\n"metadata":{ "order":"1234" },"currency":"usd","amount":5e2 } ',
  'empty object and array': '{"a":{},"b":[],"c":[{}],"d":{"e":[]}}',
  literals: '[true,false,null,{"t":true,"f":false,"n":null}]',
  'scalars alone': 'null',
  'a string alone': '"x"',
  numbers: '[0,-0,-0.0,1.0,10,100,1e5,1E+5,1e-5,0.000,123.4500e-3,-1.5,0.01,9007199254740993,1e0000000000000000000001]',
  'long exponents': '[10e1999999999999999,0.1e-1999999999999999,0.01e1000000000000000,100e-10000000000000001]',
  'a number of 4096 characters': `[1${'0'.repeat(4094)}1]`,
  'a number of 4097 characters': `[1${'0'.repeat(4095)}1]`,
  'keys out of order': '{"b":1,"a":2,"c":{"z":1,"y":[{"q":1,"p":2}]}}',
  'duplicate keys': '{"a":1,"b":2,"a":3}',
  'duplicate keys in order': '{"a":1,"a":2}',
  'duplicate keys, one escaped': '{"a":1,"\\u0061":2}',
  'escaped keys': '{"\\u0062":1,"a":2,"\\n":3,"\\"":4}',
  'keys by UTF-16 order, not code point order': '{"\uE000":1,"\u{10000}":2,"é":3,"e":4}',
  'keys by UTF-16 order, escaped': '{"\\uE000":1,"\\ud800\\udc00":2}',
  escapes: '["\\/\\b\\f\\n\\r\\t\\"\\\\","\\u0000\\u001f\\u007F\\u2028\\u00e9\\u00E9"]',
  'surrogate escapes': '["\\ud83d\\ude00","\\uD83D\\uDE00","\\ud83d","\\ude00\\ud83d","x\\udbff"]',
  'raw text': '["café","😀","\u2028","\u007f","日本"]',
  'a raw pair and an escaped half': '["😀\\ude00","\\ud83d😀"]',
  'unordered objects in arrays': '[{"b":1,"a":2},{"d":[{"f":1,"e":2}],"c":3}]',
  'nested unordered with duplicates': '{"z":{"y":1,"x":2,"y":3},"a":{"c":[1,{"b":2,"a":1}],"b":0},"z":{"k":1}}',
  'arrays 256 deep around a scalar': `${'['.repeat(256)}1${']'.repeat(256)}`,
  'arrays 257 deep around a scalar': `${'['.repeat(257)}1${']'.repeat(257)}`,
  'arrays 257 deep, empty': `${'['.repeat(257)}${']'.repeat(257)}`,
  'arrays 258 deep, empty': `${'['.repeat(258)}${']'.repeat(258)}`,
  'objects 256 deep': `${'{"a":'.repeat(256)}1${'}'.repeat(256)}`,
  'objects 257 deep': `${'{"a":'.repeat(257)}1${'}'.repeat(257)}`,
  'unordered objects 255 deep': deepUnordered(255, '"x"'),
  'a body of 4 KiB': `{"b":"${'x'.repeat(4080)}","a":1}`,
  'a body of 64 KiB': `{"pad":"${'y'.repeat(65_000)}","amount":1}`,
  'many keys, three levels': `{${keys(40, (i) => `k${i}`).replace(/:(\d+)/g, (_, n: string) => (Number(n) % 7 === 0 ? `:{${keys(30, (j) => `j${j}_${n}`)}}` : `:${n}`))}}`,
  // Refused as JSON: each is hashed raw.
  'empty body': '',
  'whitespace only': ' \n',
  'trailing text': '{"a":1} x',
  'trailing comma': '[1,]',
  'single quotes': "{'a':1}",
  'bad numbers': '[01]',
  'a bare dot': '[1.]',
  'an exponent without digits': '[1e+]',
  'a leading plus': '[+1]',
  NaN: '[NaN]',
  'a bad escape': '["\\x"]',
  'a short unicode escape': '["\\u12"]',
  'a bad hex digit': '["\\u12G4"]',
  'a raw control character': '["a\u0001b"]',
  'a raw tab in a string': '["a\tb"]',
  'a form feed as whitespace': '\f[1]',
  'a no-break space as whitespace': '\u00a0[1]',
  'a byte-order mark': '\ufeff{"a":1}',
  'unterminated string': '["abc',
  'unterminated object': '{"a":1',
  'a key without a value': '{"a"}',
  'a number as a key': '{1:2}',
  tru: '[tru]',
  nulls: '[nulls]',
  'two values': '1 2',
  'invalid UTF-8': bytes('["', [0xff], '"]'),
  'an overlong encoding': bytes('["', [0xc0, 0xaf], '"]'),
  'an encoded surrogate': bytes('["', [0xed, 0xa0, 0x80], '"]'),
  'a truncated sequence': bytes('["', [0xe6, 0x97], '"]'),
  'a truncated sequence at the end': bytes('"', [0xe6, 0x97]),
  'above U+10FFFF': bytes('["', [0xf4, 0x90, 0x80, 0x80], '"]'),
  'non-ASCII outside a string': bytes('[1', [0xc2, 0xa0], ']'),
  'invalid UTF-8 in a refused body': bytes('[', [0xff]),
};

const LARGE: Record<string, () => string> = {
  'integers 1': () => fill('1'),
  'integers 10': () => fill('10'),
  'fractions 1.5': () => fill('1.5'),
  'fractions 0.000…0001': () => fill(`0.${'0'.repeat(4093)}1`),
  'exponents 1e999…9': () => fill(`1e${'9'.repeat(4094)}`),
  'objects 255 deep in an array': () => fill(`${'{"a":'.repeat(255)}1${'}'.repeat(255)}`),
  'unordered objects 255 deep around a long string': () => {
    const open = '{"b":0,"a":'.repeat(255);
    return deepUnordered(255, `"${'x'.repeat(MiB - open.length - 255 - 2)}"`);
  },
  'one object, 50 000 shuffled keys': () => `{${keys(50_000, (i) => `key_${String(i).padStart(8, '0')}`)}}`,
  'one object, 130 000 duplicate keys': () =>
    `{${Array.from({ length: 130_000 }, (_, i) => `"k":${i % 10}`).join(',')}}`,
  'small unordered objects': () => fill('{"b":1,"a":[2,{"d":3,"c":4}]}'),
  'a long string': () => `{"amount":500,"pad":"${'z'.repeat(MiB - 30)}"}`,
  'strings with escapes': () => fill('"\\u0041\\n\\ud83d\\ude00"'),
  'non-ASCII strings': () => fill('"café 😀 日本"'),
};

const post = (body: Uint8Array, contentType = 'application/json') =>
  fingerprint({ method: 'POST', path: '/v1/charges', contentType, body });

const EXPECTED_SMALL: Record<string, string> = {
  'a charge': 'dd56f7c61df517a742c4ef8be0972a724ad012ab75a07e78e3672915039168c6',
  'a charge, reordered with whitespace': 'dd56f7c61df517a742c4ef8be0972a724ad012ab75a07e78e3672915039168c6',
  'empty object and array': 'c5b9f0ac9197922a943026c91a9301a4c840d7c6b43cae22c55f46a4e4d3000e',
  literals: 'a2ac208f95e1642a12e1cd16ed872bccc279e7238dc465528cdfaca4ae37a876',
  'scalars alone': 'c9d78e367cd0495c6f21021f6244d7432919669ec99bad7c8a0b7b4ca2e65757',
  'a string alone': '3f1eed55ce08143ba7c1d57a2fed00e8d36e0022b5e9c7c591b35dad704d43ee',
  numbers: 'a3d0848c99cc4b72a1c14bc321cc569a376444f0b3c31f83b5d26a0a00e8ded0',
  'long exponents': '64fa401e6f052d766e653d14e63cd2a7891fa9b4bfb9f42a8243738787ae574e',
  'a number of 4096 characters': '7aa2c884e96d8195edecb20d196b32118a25156889ac2c19a07fcda749ba5e6f',
  'a number of 4097 characters': '7238341ab4d651ff8aa5f2578f21cca88183f8604b569a8ac3cf3cd929a5fd93',
  'keys out of order': 'bf985375e295c12b73cd0a92b6dfb706dab6531fa496df7c167f2c8f3451b4b6',
  'duplicate keys': '7f853c362a3c9dd98b4dcf7708042056b982876cc6a21cc8f64df87675f06cb0',
  'duplicate keys in order': 'fb1f501a9b71b90b991bec3006bc431c7f5ea0ef5ec41ec8bca58b9c0c3bb4e2',
  'duplicate keys, one escaped': 'fb1f501a9b71b90b991bec3006bc431c7f5ea0ef5ec41ec8bca58b9c0c3bb4e2',
  'escaped keys': '55d72faef6f54a4a171242af7db0b95f47f959406d59a31efc40bb2d44597c52',
  'keys by UTF-16 order, not code point order': '5b1f7df04715e6fc2ed3cc49bc8987008d82e066f47b1fc920f4899b63370652',
  'keys by UTF-16 order, escaped': '5154accd81cd9ccf8836fec89d42650357f40e6e8fd94ba556ee9dc3c7865256',
  escapes: '7590be127a074a3d981e4f3c8d2a3951aa22003408d7d08d82999ba9c9fa2f1a',
  'surrogate escapes': '45d66b8eb9d30ce3d5aceb02be73d23fdeb87cca79a264a396270d1c4d89afa2',
  'raw text': '9b99b341de04b39b37ea52c84e722abbb489f99a51234bdf268f475c2cd3f909',
  'a raw pair and an escaped half': '2d5175e8f4a21b14559bd3c363897bcd20c4c5fbf489c91480495be2cef13f16',
  'unordered objects in arrays': 'ef3c118d73c101265fc62465c4a09b3ba4584ff9c8461ba1c711cd2c09f6fbea',
  'nested unordered with duplicates': 'a6667f6e34ece8c90ff834045b48c7687a7cf7c6ed8708e3f3939fe02de7c1f8',
  'arrays 256 deep around a scalar': '70d96d5ce285868ff8dc695b3467704a3af9ebb0a162f84c89f21c659cd1ae62',
  'arrays 257 deep around a scalar': 'f190d97c67a089051680808dc4a1f80c9009b630a71b141627d7d962062d3d3b',
  'arrays 257 deep, empty': '66b118dc3240bbcec531fb569e3f93b74bd557de1d267171fb1798836a402704',
  'arrays 258 deep, empty': '00b12082c8ba1888bc3ef7a7a2f66dc13452c31c82a4057c7b534043eb06e278',
  'objects 256 deep': '1cf2b7571c5d9f37d21c2789f388aa4ed274156f8b0bee880fe48089956e1d4d',
  'objects 257 deep': '62fda7574f1daee3d82fa36c35663bb6b08f0fdcd6099c6e20cfac1378d0617e',
  'unordered objects 255 deep': '9e3dea8a6500c5f613b0369b9fb5eb5cb8e4a62ba684bde3e7e6474bde3c96fd',
  'a body of 4 KiB': '6fb5d0f80c19053fe5940ca93511de3ffda2f306c493739a5c33fb2c6a5e8293',
  'a body of 64 KiB': '8024c84d03371a4b78358549715143f529d688e036602a96268362721eec6f57',
  'many keys, three levels': '847d9d6a3c3107be1e3f954372d98a36f65a1846ffc1bdff3965002fb0abdc2a',
  'empty body': 'd472f3bbc7d39890dd97b50b136e3f5460f91cc14898e56501a0bbcdd37faaf8',
  'whitespace only': 'fd728674fbb54be123b5c672a3444c6475da90e6f70d7b94436ab18555e6ced7',
  'trailing text': '980f0c3f7779273421caf361a9c3e4945430969f5b83d21222ac52dea41f44ce',
  'trailing comma': '7473f502aad21b4e3f87900b30b7f5eed8659b982a5016c6c82ae9c4088b599b',
  'single quotes': '82b75b9abbcfde77ecd62fe7623e7a71edd9d30f670d22491147c9a95f68b818',
  'bad numbers': 'ddbeee824bff5933a0ed10b096c96d31002039f06f864fd1045fcf0a390942fc',
  'a bare dot': '51269f747f2a1faada40abfe201aa1505945033330ccfd098b8aa866193a9e1f',
  'an exponent without digits': '09d802befb4db8f53f49b327450456c0d24995c3281c99c8a25e464f660298ae',
  'a leading plus': '512be7a5901d0523d6aace4182026db5ddca3bcf9817966675755e1ce156dc47',
  NaN: '8f063ed003dac726bbd914c68feafcb26c735e6b47262c6380a7aa83b7e71e2f',
  'a bad escape': '1cba8b941e23cda2d401b9373a25872079da224c474ebe20c653457ecb47ffc4',
  'a short unicode escape': 'd5b1f4141635d5a457b8dafc91862073886ca5f25a1371b64178752c68eddc97',
  'a bad hex digit': '6519e543249628c9ee206a51a7a91b245cee7f0d0b830a1767ba7ad4b004b324',
  'a raw control character': 'd75c660c9c92caaa5c005682f0f7c0a2eb868cbe8c7aae0debeb096d5e30b2bf',
  'a raw tab in a string': '588b5fb1242495a7981284f04b5edbbd7e10619f17a932f111b74e483bc8276b',
  'a form feed as whitespace': '33f0c3ec4deecc11c5476d6bb69f2eab83de9a55c450dec3917b6a347fe8ecca',
  'a no-break space as whitespace': '7ac5bf453e70561ba664db08cdc847eddd15ef8a5da020bdc98920e22b3905db',
  'a byte-order mark': '4f246e562e564a575c01ebf88dd58ecd65e6431345f2e3a38f50feb64c8d85b9',
  'unterminated string': 'f2c43ada94bf6f74124d49f773403a05bb216e2b65cda753cfda130858b9b14b',
  'unterminated object': '64995606103c9b246ca1a498ce99b71599dbdd5bf098f7dac6caf7147a6a78ae',
  'a key without a value': '5f9a575bfa54e8a1cee34e13484cff7554457bed28ac9ff794cb2f643665f5d1',
  'a number as a key': '3abd87b6cf4cf9102049e51bca8713862dad83f51d5425404b259818c28bb6b0',
  tru: 'f9993086207daff96621309f4fc3c9ebd183261e662ffe9b7d1b91e679fe3e82',
  nulls: 'efb7fd466192da7cda557e312ce7eec2fb22482ea2faaff63a5b6e82059628d5',
  'two values': '89017261a1ae89d9c6e31ccde70961df615c657b8008f63d04d04e969774a0df',
  'invalid UTF-8': '5f9335a7a515476f5707fe8e74837417bdd287ff885c10cab5679ed7686e11b3',
  'an overlong encoding': '7d274a53c4dc8b9839bd9af7341ae50500534cc90890e7dbc4fcea4dece5d3ff',
  'an encoded surrogate': '10d438fc3e048b12f6b0f70de1bc5c835bb9736939945b8c3b6004c7508b46b6',
  'a truncated sequence': '9eebd742176f53d25cf44dc45a8a3183bf87c36259b9fd563596f81b09782100',
  'a truncated sequence at the end': 'bda6fd08ddcfe2d2740a00aefe526f16d90b2c22c078e000974e28234edc4883',
  'above U+10FFFF': '29a96e594f91e0907ce0884d2d49cae193f25e84991c99bbef03a8c72e075492',
  'non-ASCII outside a string': 'fa14ed3dd1c4d8156358e8d9a7a488f67ff1608f5eb770fe9a4877a76105d4fb',
  'invalid UTF-8 in a refused body': 'e70b0d77f9709aee328bbf72853dee4e1373dc06f020630b2bbf075e2ba13ee0',
};
const EXPECTED_LARGE: Record<string, string> = {
  'integers 1': '6d4c0a0b61a5f77a7f7863d45a61a7ec43d5e56956062b5a79edbea45117cd73',
  'integers 10': '88694f72829e64dc623d5958f9b26ed63c7dc418ebfccedf06f1f94987b563e6',
  'fractions 1.5': '6d0e3906b147dda104146313ab4e5858cb3edaae3b7b4d87b63ae3ed4345a4f9',
  'fractions 0.000…0001': '382f1519c918a4f944f160f7b03ca5f3c37eec061c4b965d5ce503f869ab879b',
  'exponents 1e999…9': '54ae7a0869cd66d10a96cfda7d7cf6c03b8804244f388b49c464ac54155ce9d0',
  'objects 255 deep in an array': 'e0ae8e5bd4e75f70573553dd743479adcdf75e5817ef3a13700e5fd946205c4c',
  'unordered objects 255 deep around a long string': 'a8ba0603d7bda25bf021d583885f13000a1b158da0f73d64fb2a2589ba22ef41',
  'one object, 50 000 shuffled keys': '409a8b7dc3e80651dcf49d19cac504cf099dd5fb0e70f8ebc457698eff74b7f5',
  'one object, 130 000 duplicate keys': '44881e620f675c89ff1815838d80f3b1fe08da55f5bc5758e6b01ed649141fbb',
  'small unordered objects': '8361db224ac0abc390baa20d2016b30e020fbc9f53548637bac841bcd01a6bf6',
  'a long string': 'b818abddd7506facb79cbf249d3317dfb8b1409a8923f9f0771c3595ac0b4b9f',
  'strings with escapes': 'b71322abc3cd1e9b00eb2aadbb70dafce2161457a1424397ab9c8ea7d6f5bd36',
  'non-ASCII strings': 'a423daea00933858fe667429e5354163c7592e7aeeac5d932c99ccea5de7075a',
};

describe('the fingerprint of a corpus of bodies is the one stored records already carry', () => {
  it('small bodies', () => {
    const actual = Object.fromEntries(
      Object.entries(SMALL).map(([name, body]) => [name, post(typeof body === 'string' ? utf8(body) : body)]),
    );
    expect(actual).toEqual(EXPECTED_SMALL);
  });

  it('1 MiB bodies', () => {
    const actual = Object.fromEntries(
      Object.entries(LARGE).map(([name, make]) => {
        const body = utf8(make());
        expect([name, body.byteLength <= MiB]).toEqual([name, true]);
        return [name, post(body)];
      }),
    );
    expect(actual).toEqual(EXPECTED_LARGE);
  });

  it('with a query, headers, and as text/plain', () => {
    const body = utf8(SMALL['nested unordered with duplicates'] as string);
    const withAll = fingerprint({
      method: 'put',
      path: '/v1/charges/ch_1',
      query: '?b=2&a=1&a=0',
      contentType: 'application/merge-patch+json; charset=utf-8',
      body,
      headers: [
        ['X-Api-Version', '2'],
        ['x-tenant', 'é'],
      ],
    });
    expect([withAll, post(body, 'text/plain'), post(utf8(LARGE['integers 1']!()), 'text/plain')]).toEqual([
      'bb9b8f6d82b205513c825548e4ffc2bc56027057f067605743724fefbb63ee0f',
      'cd7d80ce82ae49e21849ce470e5e4ab99ebf135e8eb0566675d20c374fd91a7e',
      'd2ef0d6f2d7e16308074211d1dd9e9e815b21d658a35c3e512b911b089c9e066',
    ]);
  });
});
