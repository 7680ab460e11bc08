// Tests of the JavaScript verifier, node's built-in runner only:  node --test verifiers/javascript/
// (or node verifiers/javascript/test.js). The agreement with the Python module is verifiers/run.sh's.
'use strict';

const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const vm = require('node:vm');
const { after, describe, test } = require('node:test');
const jcs = require('./jcs.js');
const audit = require('./verify_audit.js');

const VECTORS = path.join(__dirname, '..', 'vectors');

function bitsToNumber(hex) {
  return Buffer.from(hex, 'hex').readDoubleBE();
}

function decodeCode(text, options) {
  try {
    jcs.decodeStrictJson(Buffer.from(text, 'utf8'), options);
  } catch (error) {
    if (error instanceof jcs.JsonError) return error.code;
    throw error;
  }
  return 'decoded';
}

describe('RFC 8785 vectors', () => {
  const names = fs.readdirSync(path.join(VECTORS, 'jcs', 'input')).sort();

  test('all six pairs are present', () => {
    assert.deepEqual(names, ['arrays.json', 'french.json', 'structures.json', 'unicode.json', 'values.json', 'weird.json']);
  });

  for (const name of names) {
    test(`${name} canonicalizes to its output, from JSON.parse and from the strict decoder`, () => {
      const input = fs.readFileSync(path.join(VECTORS, 'jcs', 'input', name));
      const expected = fs.readFileSync(path.join(VECTORS, 'jcs', 'output', name));
      assert.deepEqual(Buffer.from(jcs.canonicalBytes(JSON.parse(input.toString('utf8')))), expected);
      assert.deepEqual(Buffer.from(jcs.canonicalBytes(jcs.decodeStrictJson(input))), expected);
    });
  }
});

describe('number vectors', () => {
  const document = JSON.parse(fs.readFileSync(path.join(VECTORS, 'numbers.json'), 'utf8'));

  test('the file is the generator format and holds about two thousand vectors', () => {
    assert.equal(document.format, 'jcs-number-vectors-v1');
    assert.ok(document.vectors.length >= 2000, String(document.vectors.length));
  });

  test('every double is written as its vector says, and the text reads back to the same double', () => {
    for (const [bits, expected] of document.vectors) {
      const value = bitsToNumber(bits);
      assert.equal(jcs.numberText(value), expected, bits);
      assert.equal(jcs.canonicalText(new jcs.Double(value)), expected, bits);
      if (/^-?[0-9]+$/.test(expected) && Math.abs(value) > jcs.MAX_SAFE_INTEGER) {
        // A whole number from 2**53 up to 1e21 is written without a point: the portable decoder
        // reads an integer no peer holds exactly, and refuses it, as the Python decoder does.
        assert.equal(decodeCode(expected), 'JSON_NOT_PORTABLE', bits);
        continue;
      }
      const back = jcs.decodeStrictJson(Buffer.from(expected));
      const read = back instanceof jcs.Double ? back.value : back;
      assert.ok(Object.is(read, value) || (value === 0 && read === 0), bits);
      assert.equal(jcs.canonicalText(back), expected, bits);
    }
  });
});

describe('canonical text', () => {
  test('keys sort by UTF-16 code units, not by code points', () => {
    // U+FF5A is above U+1D49C as a code point, below it as code units (0xFF5A > 0xD835).
    assert.equal(jcs.canonicalText({ '\uff5a': 1, '\u{1d49c}': 2 }), '{"\u{1d49c}":2,"\uff5a":1}');
    assert.equal(jcs.canonicalText({ b: 1, a: 2, '': 3, A: 4, '10': 5, '1': 6 }), '{"":3,"1":6,"10":5,"A":4,"a":2,"b":1}');
  });

  test('strings are escaped as JSON.stringify escapes them, and nothing more', () => {
    assert.equal(jcs.canonicalText('\u0000\u001f"\\\b\f\n\r\t'), '"\\u0000\\u001f\\"\\\\\\b\\f\\n\\r\\t"');
    assert.equal(jcs.canonicalText('\u007f\u2028\u2029/\u00e9\u{1f600}'), '"\u007f\u2028\u2029/\u00e9\u{1f600}"');
  });

  test('numbers follow ECMAScript: -0 is 0, and the notation changes at 1e21 and 1e-7', () => {
    const cases = [[-0, '0'], [1e21, '1e+21'], [1e20, '100000000000000000000'], [1e-7, '1e-7'], [1e-6, '0.000001'],
      [0.1 + 0.2, '0.30000000000000004'], [5e-324, '5e-324'], [2 ** 53, '9007199254740992']];
    for (const [value, text] of cases) assert.equal(jcs.canonicalText(value), text);
  });

  test('a value with no canonical text is refused', () => {
    for (const value of [NaN, Infinity, -Infinity, '\ud800', { '\udc00': 1 }, undefined, () => 1, new Date(0)]) {
      assert.throws(() => jcs.canonicalText(value), TypeError);
    }
  });

  test('a "__proto__" member is a member, and stays one', () => {
    const value = jcs.decodeStrictJson(Buffer.from('{"__proto__":{"polluted":true},"a":1}'));
    assert.equal(jcs.canonicalText(value), '{"__proto__":{"polluted":true},"a":1}');
    assert.equal({}.polluted, undefined);
  });
});

describe('the strict decoder', () => {
  test('refuses what JSON.parse would read another way', () => {
    assert.equal(decodeCode('{"a":1,"a":2}'), 'JSON_DUPLICATE_KEY');
    assert.equal(decodeCode('["\\ud800"]'), 'JSON_NOT_PORTABLE');
    assert.equal(decodeCode('9007199254740992'), 'JSON_NOT_PORTABLE');
    assert.equal(decodeCode('1e400'), 'JSON_NON_FINITE');
    assert.equal(decodeCode('NaN'), 'JSON_NON_FINITE');
  });

  test('keeps the integers on both sides of the safe limit apart', () => {
    assert.equal(jcs.decodeStrictJson(Buffer.from('9007199254740991')), 9007199254740991);
    assert.equal(jcs.decodeStrictJson(Buffer.from('-9007199254740991')), -9007199254740991);
    assert.equal(decodeCode('-9007199254740992'), 'JSON_NOT_PORTABLE');
  });

  test('tells a float written 1.0 from the integer 1', () => {
    assert.ok(jcs.decodeStrictJson(Buffer.from('1.0')) instanceof jcs.Double);
    assert.equal(typeof jcs.decodeStrictJson(Buffer.from('1')), 'number');
  });

  test('holds the byte and depth limits on both sides', () => {
    assert.equal(decodeCode('[1,2]', { maxBytes: 5 }), 'decoded');
    assert.equal(decodeCode('[1,2] ', { maxBytes: 5 }), 'JSON_TOO_LARGE');
    assert.equal(decodeCode('[[1]]', { maxDepth: 2 }), 'decoded');
    assert.equal(decodeCode('[[[1]]]', { maxDepth: 2 }), 'JSON_TOO_DEEP');
  });

  test('refuses the first fault in text order, as the Python decoder does', () => {
    assert.equal(decodeCode('[1e400, 01]'), 'JSON_NON_FINITE');
    assert.equal(decodeCode('[01, 1e400]'), 'JSON_INVALID');
    assert.equal(decodeCode('{"a":{"b":1,"b":2},"c":1e400}'), 'JSON_DUPLICATE_KEY');
    assert.equal(decodeCode('{"a":"\\ud800","a":1}'), 'JSON_DUPLICATE_KEY');
  });

  test('refuses invalid UTF-8 and a byte order mark', () => {
    assert.throws(() => jcs.decodeStrictJson(Buffer.from([0x5b, 0x22, 0xff, 0x22, 0x5d])), { code: 'JSON_NOT_UTF8' });
    assert.throws(() => jcs.decodeStrictJson(Buffer.from([0xef, 0xbb, 0xbf, 0x7b, 0x7d])), { code: 'JSON_INVALID' });
  });
});

// A small log written here, with the digests this verifier computes: what it accepts, and each
// edit it refuses. The Python writer's logs are run.sh's business.
function miniLog(secrets = null, keyId = null) {
  const pkg = {
    execution: { effects: 0, handler_invoked: true, operation_state: 'none' },
    format: 'tool-result-package-v4',
    model_result: { status: 'ok', data: { ratio: new jcs.Double(0.5) } },
    protected_audit: {
      approval: null, arguments: { order_ref: 'ORDER-7' }, downstream: { request_ref: null },
      principal: { tenant: 't' }, provider_context: { call_id: 'c' }, redactions: [], resource_revision: 3,
      tool_contract: { tool: 'get_order', input_revision: 'i', output_revision: 'o', effect_revision: 'e' },
    },
    seal: { hmac_sha256: null, key_id: null },
  };
  [pkg.protected_audit.request_sha256, pkg.protected_audit.result_sha256, pkg.protected_audit.call_binding_sha256] = audit.packageDigests(pkg);
  const seal = (digest) => (secrets === null ? { hmac_sha256: null, key_id: null } : {
    hmac_sha256: crypto.createHmac('sha256', secrets.get(keyId)).update(jcs.canonicalBytes({
      domain: audit.CONSTANTS.SEAL_DOMAIN, key_id: keyId, purpose: 'audit-entry', digest,
    })).digest('hex'),
    key_id: keyId,
  });
  const lines = [];
  let previous = audit.CONSTANTS.GENESIS_SHA256;
  const bodies = [0, 1].map((index) => ({ format: 'audit-log-v2', index, package: pkg }));
  bodies.push({ closed: true, format: 'audit-log-v2', index: 2 });
  for (const body of bodies) {
    body.previous_sha256 = previous;
    const digest = audit.entryDigest(body);
    lines.push(jcs.canonicalText({ ...body, entry_sha256: digest, seal: seal(digest) }));
    previous = digest;
  }
  return lines;
}

const asLog = (lines) => Buffer.from(lines.map((line) => `${line}\n`).join(''));

function verdict0(data, options) {
  try {
    return audit.verifyAuditLog(data, options);
  } catch (error) {
    if (error instanceof audit.CatalogError) return `${error.code} ${error.at}`;
    throw error;
  }
}

function verdict(lines, options) {
  try {
    return audit.verifyAuditLog(asLog(lines), options);
  } catch (error) {
    if (error instanceof audit.CatalogError) return `${error.code} ${error.at}`;
    throw error;
  }
}

describe('the audit log', () => {
  test('a canonical line hashes from its bytes as from its members', () => {
    for (const line of miniLog()) {
      const entry = jcs.decodeStrictJson(Buffer.from(line));
      assert.equal(audit.lineDigest(Buffer.from(line)), audit.entryDigest(entry));
    }
  });

  test('a whole log passes, and names its head', () => {
    const report = verdict(miniLog());
    assert.equal(report.entries, 2);
    assert.equal(report.heads.length, 3);
    assert.equal(report.head_sha256, report.heads[2]);
  });

  test('each edit is named at its entry', () => {
    const lines = miniLog();
    assert.equal(verdict([lines[0], lines[2]]), 'AUDIT_ENTRY_DELETED entries[1]');
    assert.equal(verdict([lines[1], lines[0], lines[2]]), 'AUDIT_ENTRY_REORDERED entries[0]');
    assert.equal(verdict([lines[0], lines[0], lines[1], lines[2]]), 'AUDIT_ENTRY_INSERTED entries[1]');
    assert.equal(verdict(lines.slice(0, 2)), 'AUDIT_TRUNCATED entries[2]');
    assert.equal(verdict([lines[0].replace('ORDER-7', 'ORDER-8'), ...lines.slice(1)]), 'AUDIT_ENTRY_EDITED entries[0]');
    assert.equal(verdict([`${lines[0]}\r`, ...lines.slice(1)]), 'AUDIT_MALFORMED entries[0]');
    assert.equal(verdict([...lines, lines[0]]), 'AUDIT_MALFORMED entries[2]');
  });

  test("a package whose digests do not match it is refused, even in a recomputed chain", () => {
    const entries = miniLog().map((line) => jcs.decodeStrictJson(Buffer.from(line)));
    entries[1].package.model_result.status = 'edited';
    let previous = audit.CONSTANTS.GENESIS_SHA256;
    const lines = entries.map((entry) => {
      entry.previous_sha256 = previous;
      delete entry.entry_sha256;
      delete entry.seal;
      const digest = audit.entryDigest(entry);
      previous = digest;
      return jcs.canonicalText({ ...entry, entry_sha256: digest, seal: { hmac_sha256: null, key_id: null } });
    });
    assert.equal(verdict(lines), 'AUDIT_PACKAGE_DIGEST entries[1]');
    // The chain is judged whole first: a fault anywhere in it is named before any package's.
    assert.equal(verdict(lines.slice(0, 2)), 'AUDIT_TRUNCATED entries[2]');
  });

  test('seals: the right key passes, another secret fails, an unknown id and a missing seal are named', () => {
    const secrets = new Map([['k-a', Buffer.alloc(32, 1)]]);
    const sealed = miniLog(secrets, 'k-a');
    assert.equal(verdict(sealed, { secrets, requireSeal: true }).sealed, true);
    assert.equal(verdict(sealed, {}).sealed, false);
    assert.equal(verdict(sealed, { secrets: new Map([['k-a', Buffer.alloc(32, 2)]]), requireSeal: true }),
      'AUDIT_ENTRY_EDITED entries[0]');
    assert.equal(verdict(sealed, { secrets: new Map([['k-b', Buffer.alloc(32, 1)]]), requireSeal: true }),
      'AUDIT_KEY_UNKNOWN entries[0]');
    assert.equal(verdict(miniLog(), { secrets, requireSeal: true }), 'AUDIT_UNSEALED entries[0]');
  });

  test('a flood of newlines is counted, never split into views one a line', () => {
    // 256 MiB of newlines is 268 million lines: a view of each does not fit in memory (node died).
    class Counted extends Uint8Array {
      subarray(...range) {
        Counted.views += 1;
        return super.subarray(...range);
      }
    }
    Counted.views = 0;
    const flood = new Counted(audit.CONSTANTS.MAX_AUDIT_ENTRIES + 2).fill(0x0a);
    assert.equal(verdict0(flood), `AUDIT_MALFORMED entries[${audit.CONSTANTS.MAX_AUDIT_ENTRIES + 1}]`);
    assert.equal(Counted.views, 0);
    const cut = new Counted(audit.CONSTANTS.MAX_AUDIT_ENTRIES + 3).fill(0x0a);
    cut[cut.length - 1] = 0x7b;
    assert.equal(verdict0(cut), `AUDIT_TRUNCATED entries[${audit.CONSTANTS.MAX_AUDIT_ENTRIES + 2}]`);
    assert.equal(Counted.views, 0);
  });

  test('no decoded entry is held from one line to the next: a log of empty objects fits a small heap', () => {
    // Each line a valid entry's shape holding 20,000 empty objects, 16 MiB in all: held whole, its
    // values need more than the 96 MiB heap the verifier is run with here (node died at 4 GiB on
    // 256 MiB of them, where the Python module answers).
    const room = 65_536 - 300; // the rest of the line, whatever its index
    const objects = `[${Array(Math.floor(room / 3)).fill('{}').join(',')}]`;
    const zeros = '0'.repeat(64);
    const line = (index) => `{"entry_sha256":"${zeros}","format":"audit-log-v2","index":${index},`
      + `"package":{"x":${objects}},"previous_sha256":"${zeros}","seal":{"hmac_sha256":null,"key_id":null}}\n`;
    const count = Math.floor((16 * 1024 * 1024) / line(0).length);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'td-verify-'));
    try {
      const log = path.join(dir, 'objects.log');
      fs.writeFileSync(log, Array.from({ length: count }, (_, index) => line(index)).join(''));
      const run = childProcess.spawnSync(process.execPath, ['--max-old-space-size=96', path.join(__dirname, 'verify_audit.js'),
        '--verify-audit', log], { encoding: 'utf8' });
      assert.equal(run.stderr, '');
      assert.equal(run.status, 1);
      assert.deepEqual([JSON.parse(run.stdout).failure.code, JSON.parse(run.stdout).failure.at], ['AUDIT_ENTRY_EDITED', 'entries[0]']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a seal-keys document is held to the file format', () => {
    const good = { format: 'seal-keys-v1', current: 'k-a', keys: [{ key_id: 'k-a', secret_hex: 'ab'.repeat(32) }] };
    assert.equal(audit.parseSealKeys(good).get('k-a').length, 32);
    const bad = [
      { ...good, current: 'k-b' },
      { ...good, keys: [{ key_id: 'k-a', secret_hex: 'ab'.repeat(31) }] },
      { ...good, keys: [{ key_id: 'k-a', secret_hex: 'ab'.repeat(65) }] },
      { ...good, keys: [{ key_id: 'k-a', secret_hex: 'AB'.repeat(32) }] },
      { ...good, keys: [] },
      { ...good, extra: 1 },
    ];
    for (const document of bad) assert.throws(() => audit.parseSealKeys(document), { code: 'SEAL_KEYS_INVALID' });
    assert.equal(audit.parseSealKeys({ ...good, keys: [{ key_id: 'k-a', secret_hex: 'ab'.repeat(64) }] }).size, 1);
  });
});

describe('the command line', () => {
  const usage = (argv) => {
    const written = [];
    const write = process.stdout.write;
    process.stdout.write = (text) => written.push(text);
    try {
      return [audit.run(argv), JSON.parse(written.join('')).error?.code];
    } finally {
      process.stdout.write = write;
    }
  };

  test('refuses what argparse refuses, with CLI_USAGE and exit 2', () => {
    for (const argv of [[], ['--verify-audit'], ['--verify-audit', '-x'], ['--verify-audit', 'a', 'b'],
      ['--verify-audit', 'a', '--report'], ['--verify', 'a'], ['--verify-audit', 'a', '--'],
      ['--digests', 'a', '--seal-key', 'k'], ['--verify-audit', 'a', '--seal-key', 'k', '--public-key', 'p']]) {
      assert.deepEqual(usage(argv), [2, 'CLI_USAGE'], JSON.stringify(argv));
    }
  });

  test('reads a value that only looks like a number or holds a space as a value', () => {
    for (const value of ['-5', '-1.5', '- x', '-', '-5\n', '-.5\n', '-\u0661', '-\u0661.\u0662', '--bogus=a b']) {
      assert.deepEqual(usage(['--verify-audit', `/nonexistent/${value}`]), [2, 'AUDIT_LOG_UNREADABLE']);
      assert.deepEqual(usage(['--verify-audit', value]), [2, 'AUDIT_LOG_UNREADABLE'], JSON.stringify(value));
    }
  });

  test('never takes for a value what argparse reads as an option, space or not', () => {
    // "--name=..." of any option the Python CLIs know, and -h with anything after it.
    for (const value of ['--seal-key=a b', '--fixture=a b', '--report=x y', '--help=a b', '-h x', '-help me', '-hx',
      '-5\n\n']) {
      assert.deepEqual(usage(['--verify-audit', value]), [2, 'CLI_USAGE'], JSON.stringify(value));
      assert.deepEqual(usage(['--verify-audit', 'a', '--seal-key', value]), [2, 'CLI_USAGE'], JSON.stringify(value));
    }
  });
});

describe('checkpoints', () => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'td-checkpoints-'));
  after(() => fs.rmSync(folder, { recursive: true, force: true }));
  const pair = () => crypto.generateKeyPairSync('ed25519');
  const pemFile = (name, keyObject, type) => {
    const file = path.join(folder, name);
    fs.writeFileSync(file, keyObject.export({ format: 'pem', type }));
    return file;
  };
  const signer = pair();
  const publicKey = audit.loadPublicKey(pemFile('public.pem', signer.publicKey, 'spki'));
  const heads = miniLogHeads();
  const checkpoint = (entries, head = heads[entries - 1], keys = signer, keyId = publicKey.keyId) => {
    const claims = { entries, head_sha256: head, key_id: keyId };
    const signature = crypto.sign(null, audit.signedMessage(claims), keys.privateKey).toString('base64');
    return jcs.canonicalText({ ...claims, format: 'audit-checkpoint-v1', signature_ed25519: signature });
  };
  const check = (lines, raw) => {
    try {
      return audit.verifyCheckpoints(raw ?? Buffer.from(lines.map((line) => `${line}\n`).join('')), heads, publicKey);
    } catch (error) {
      if (error instanceof audit.CatalogError) return `${error.code} ${error.at}`;
      throw error;
    }
  };

  function miniLogHeads() {
    return audit.verifyAuditLog(asLog(miniLog())).heads;
  }

  test('signed heads in order, the closing one last, pass; one left out in between is no fault', () => {
    assert.equal(check([checkpoint(1), checkpoint(2), checkpoint(3)]), 3);
    assert.equal(check([checkpoint(2), checkpoint(3)]), 2);
    assert.equal(check([checkpoint(3)]), 1);
  });

  test('each fault is named at its checkpoint', () => {
    assert.equal(check([checkpoint(2), checkpoint(1), checkpoint(3)]), 'CHECKPOINT_ORDER checkpoints[1]');
    assert.equal(check([checkpoint(3), checkpoint(4, heads[2])]), 'CHECKPOINT_BEYOND_LOG checkpoints[1]');
    assert.equal(check([checkpoint(2, heads[0]), checkpoint(3)]), 'CHECKPOINT_HEAD_MISMATCH checkpoints[0]');
    assert.equal(check([checkpoint(3, heads[2], pair())]), 'CHECKPOINT_SIGNATURE_INVALID checkpoints[0]');
    assert.equal(check([checkpoint(3, heads[2], signer, '0123456789abcdef')]), 'CHECKPOINT_KEY_UNKNOWN checkpoints[0]');
    assert.equal(check([checkpoint(1), checkpoint(2)]), 'CHECKPOINT_MISSING_CLOSE checkpoints[2]');
    assert.equal(check([]), 'CHECKPOINT_MISSING_CLOSE checkpoints[0]');
    assert.equal(check([checkpoint(3).replace(',"format"', ', "format"')]), 'CHECKPOINT_MALFORMED checkpoints[0]');
    assert.equal(check([], Buffer.from(checkpoint(3))), 'CHECKPOINT_MALFORMED checkpoints[0]');
  });

  test('a public key file is exactly one Ed25519 SubjectPublicKeyInfo block', () => {
    const refused = [
      pemFile('private.pem', signer.privateKey, 'pkcs8'),
      pemFile('x25519.pem', crypto.generateKeyPairSync('x25519').publicKey, 'spki'),
    ];
    const text = fs.readFileSync(path.join(folder, 'public.pem'), 'latin1');
    for (const [name, body] of [['preamble.pem', `key:\n${text}`], ['twice.pem', text + text], ['crlf.pem', text.replace(/\n/g, '\r\n')]]) {
      fs.writeFileSync(path.join(folder, name), body, 'latin1');
      refused.push(path.join(folder, name));
    }
    for (const file of refused) assert.throws(() => audit.loadPublicKey(file), { code: 'PUBLIC_KEY_INVALID' }, file);
    assert.throws(() => audit.loadPublicKey(path.join(folder, 'absent.pem')), { code: 'PUBLIC_KEY_UNREADABLE' });
  });
});

describe('the rules outside node', () => {
  // What a browser offers and node's own modules do not: no require, no module, no Buffer, no
  // process, no crypto. The rules load there and give the answer the command line gives.
  // Each file runs in a scope of its own, as a module script does (viewer/audit-viewer.html).
  const context = vm.createContext({ TextEncoder, TextDecoder, atob, btoa });
  for (const name of ['jcs.js', 'audit_core.js']) {
    const source = fs.readFileSync(path.join(__dirname, name), 'utf8');
    vm.runInContext(`(function () {\n${source}\n})();`, context, { filename: name });
  }
  const core = vm.runInContext('globalThis.ToolDispatcherAuditCore', context);
  const Bytes = vm.runInContext('Uint8Array', context);
  const answer = (request) => {
    if (request.op !== 'sha256') throw new TypeError(request.op);
    return crypto.createHash('sha256').update(request.data).digest('hex');
  };

  test('they load with none of node, and find the jcs module beside them', () => {
    assert.equal(vm.runInContext('typeof require + typeof module + typeof Buffer + typeof process', context),
      'undefinedundefinedundefinedundefined');
    assert.equal(typeof core.verifyAnswer, 'function');
  });

  test('a log verifies there as on the command line, and an edit is named the same way', () => {
    const log = asLog(miniLog());
    const there = core.runSync(core.verifyAnswer(new Bytes(log), null), answer);
    const here = audit.verifyAuditLog(log);
    assert.deepEqual(JSON.parse(core.answerText(there.output)),
      { passed: true, entries: here.entries, head_sha256: here.head_sha256, sealed: false });
    const edited = Buffer.from(log.toString('latin1').replace('ORDER-7', 'ORDER-9'), 'latin1');
    const refused = core.runSync(core.verifyAnswer(new Bytes(edited), null), answer);
    assert.deepEqual([refused.status, refused.output.failure.code, refused.output.failure.at], [1, 'AUDIT_ENTRY_EDITED', 'entries[0]']);
  });
});
