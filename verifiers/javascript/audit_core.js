// The rules of the second verifier of tool-dispatcher audit logs: every check of a line, of the
// chain, of a seal, of a package's digests and of an Ed25519 checkpoint, and the answer the
// command line prints for them. No file, no process, no crypto library: it runs unchanged in node
// (verify_audit.js, the command line, requires it) and in a browser (viewer/audit-viewer.html
// inlines it as a module script, where it is globalThis.ToolDispatcherAuditCore).
//
// Every digest, MAC and signature check is asked for with `yield` and answered by whoever drives
// the steps: verify_audit.js answers at once with node:crypto (runSync), the viewer with Web
// Crypto's promises (runAsync). So one body of rules serves both, in the same order, with the
// same answers; only the four primitives below differ, and each is a standard one:
//
//   {op: 'sha256', data}                      -> the lowercase hex SHA-256 of the bytes
//   {op: 'hmac-sha256', key, data, mac}       -> whether HMAC-SHA256(key, data) is the 64 hex
//                                                digits `mac`, compared in constant time
//   {op: 'ed25519-key', spki}                 -> a key for 'ed25519-verify', or null if refused
//   {op: 'ed25519-verify', key, data, signature} -> whether the signature holds
//
// Sections: 1. the module's constants and messages; 2. bytes; 3. seal keys; 4. entries and the
// chain; 5. package digests; 6. checkpoints; 7. the command line's answers; 8. running the steps.
'use strict';

const jcs = typeof require === 'function' ? require('./jcs.js') : globalThis.ToolDispatcherJcs;

// ============================================================================================
// 1. The module's constants and messages
// ============================================================================================
// Copied from tool_dispatcher.py, not read from it: a verifier that needs the Python module to
// run would be no second implementation. verifiers/run.sh compares these tables with the module's.

const CONSTANTS = Object.freeze({
  AUDIT_LOG_FORMAT: 'audit-log-v2',
  AUDIT_ENTRY_DOMAIN: 'tool-dispatcher/audit-entry/v2',
  SEAL_DOMAIN: 'tool-dispatcher/seal/v2',
  REQUEST_DIGEST_DOMAIN: 'tool-dispatcher/request/v3',
  RESULT_DIGEST_DOMAIN: 'tool-dispatcher/result/v3',
  CALL_BINDING_DIGEST_DOMAIN: 'tool-dispatcher/call-binding/v4',
  SEAL_KEYS_FORMAT: 'seal-keys-v1',
  SEAL_KEYS_ENVIRONMENT: 'TOOL_DISPATCHER_SEAL_KEYS', // names a seal-keys file when --seal-key does not
  GENESIS_SHA256: '0'.repeat(64), // the "previous entry" of the first one
  MAX_AUDIT_LINE_BYTES: 65_536, // one entry
  MAX_AUDIT_ENTRIES: 1_000_000, // entries one verification reads
  MAX_AUDIT_LOG_BYTES: 256 * 1024 * 1024, // a log one verification reads, whole
  MAX_SEAL_KEYS: 16, // keys a verifier accepts at once
  MIN_SEAL_KEY_BYTES: 32, // HMAC-SHA256 keys no shorter than its output
  MAX_SEAL_KEY_BYTES: 64, // SHA-256's block
  MAX_SEAL_KEYS_BYTES: 8_192, // a seal-keys file
  MAX_IDENTIFIER_LENGTH: 64, // a key id
});

// The catalog's audit scope: code -> the module's fixed message. None is retryable. AUDIT_LOG_EXISTS
// is the writer's (a run never writes over a log): the table holds it, the verifier never prints it.
const MESSAGES = Object.freeze({
  AUDIT_LOG_UNREADABLE: 'The audit log could not be read.',
  AUDIT_LOG_EXISTS: 'The audit log already exists: a run writes a new file, never over one.',
  AUDIT_MALFORMED: 'An audit log line is not a canonical entry of this format.',
  AUDIT_ENTRY_EDITED: 'An audit entry was changed after it was written.',
  AUDIT_ENTRY_DELETED: 'An audit entry is missing from the chain.',
  AUDIT_ENTRY_INSERTED: 'An audit entry was added to the chain.',
  AUDIT_ENTRY_REORDERED: 'Audit entries are out of order.',
  AUDIT_TRUNCATED: 'The audit log ends before its closing entry.',
  AUDIT_KEY_UNKNOWN: 'An audit entry is sealed with a key this verifier does not hold.',
  AUDIT_UNSEALED: 'An audit entry is not sealed, and this verifier requires seals.',
  AUDIT_PACKAGE_DIGEST: "A package's digests do not match the package itself.",
  SEAL_KEYS_INVALID: 'The seal keys are malformed.',
  SEAL_KEYS_UNREADABLE: 'The seal keys could not be read.',
  CLI_USAGE: 'The command line is not valid; see --help.',
  INTERNAL_ERROR: 'The dispatcher failed unexpectedly.',
});

// The checkpoint layer's own codes, those this verifier can print (signatures/audit_signatures.py
// holds them in its catalog, and signatures/ci.sh compares the two).
const CHECKPOINT_MESSAGES = Object.freeze({
  CHECKPOINTS_UNREADABLE: 'The checkpoint file could not be read.',
  CHECKPOINT_MALFORMED: 'A checkpoint line is not a canonical checkpoint of this format.',
  CHECKPOINT_KEY_UNKNOWN: 'A checkpoint names a key other than the public key given.',
  CHECKPOINT_SIGNATURE_INVALID: 'A checkpoint signature does not verify under the public key.',
  CHECKPOINT_HEAD_MISMATCH: "A checkpoint's head is not the chain's head after its entries.",
  CHECKPOINT_ORDER: 'Checkpoints are not in increasing order of entries.',
  CHECKPOINT_BEYOND_LOG: 'A checkpoint counts more entries than the log holds.',
  CHECKPOINT_MISSING_CLOSE: 'No checkpoint signs the closing head of the log.',
  PUBLIC_KEY_INVALID: 'The public key is not an Ed25519 SubjectPublicKeyInfo PEM.',
  PUBLIC_KEY_UNREADABLE: 'The public key could not be read.',
});

const CHECKPOINT_CONSTANTS = Object.freeze({
  CHECKPOINT_FORMAT: 'audit-checkpoint-v1',
  CHECKPOINT_DOMAIN: 'tool-dispatcher/checkpoint/v1',
  CHECKPOINTS_SUFFIX: '.checkpoints', // the file beside the log
  MAX_CHAIN_LINES: CONSTANTS.MAX_AUDIT_ENTRIES + 1, // the entries a log may hold, and its closing entry
  MAX_CHECKPOINT_LINE_BYTES: 512, // the longest checkpoint is 270 bytes
  MAX_CHECKPOINTS_BYTES: (CONSTANTS.MAX_AUDIT_ENTRIES + 1) * 513, // one a chain line at most
  MAX_KEY_FILE_BYTES: 4_096, // an Ed25519 PEM is about 120 bytes
  KEY_ID_HEX: 16, // hex digits of the public key's SHA-256 that name it
  ED25519_SPKI_PREFIX: '302a300506032b6570032100', // the DER before the 32 key bytes (RFC 8410)
  // The points of small order as their 32 bytes with x's sign bit cleared (y + p spellings too):
  // every signature verifies under such a key, which names no signer.
  ED25519_SMALL_ORDER_Y: Object.freeze([
    '0000000000000000000000000000000000000000000000000000000000000000',
    '0100000000000000000000000000000000000000000000000000000000000000',
    '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
    'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
    'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
    'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
    'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  ]),
});

const IDENTIFIER = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;
const DIGEST = /^[0-9a-f]{64}$/;
const HEX = /^(?:[0-9a-f]{2})+$/;
const ENTRY_FIELDS = Object.freeze(['format', 'index', 'previous_sha256', 'package', 'entry_sha256', 'seal']);
const CLOSING_FIELDS = Object.freeze(['format', 'index', 'previous_sha256', 'closed', 'entry_sha256', 'seal']);
const SEAL_FIELDS = Object.freeze(['key_id', 'hmac_sha256']);
const SEAL_KEYS_FIELDS = Object.freeze(['format', 'current', 'keys']);
const SEAL_KEY_FIELDS = Object.freeze(['key_id', 'secret_hex']);
const NULL_CONTRACT = Object.freeze({ tool: null, input_revision: null, output_revision: null, effect_revision: null });
// What a package's three digests are computed from, and the digests: all present, or the package fails.
const DIGESTED_AUDIT_FIELDS = Object.freeze([
  'principal', 'tool_contract', 'arguments', 'provider_context', 'downstream', 'approval', 'redactions',
  'resource_revision', 'request_sha256', 'result_sha256', 'call_binding_sha256',
]);

class CatalogError extends Error {
  constructor(code, at = '') {
    if (!Object.hasOwn(MESSAGES, code) && !Object.hasOwn(CHECKPOINT_MESSAGES, code)) {
      throw new TypeError('unknown error code');
    }
    super(code);
    this.code = code;
    this.at = at;
  }

  toJSON() {
    const view = { code: this.code, message: MESSAGES[this.code] || CHECKPOINT_MESSAGES[this.code], retryable: false };
    if (this.at) view.at = this.at;
    return view;
  }
}

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value)
  && !(value instanceof jcs.Double);
const isInteger = (value) => typeof value === 'number'; // the decoder reads 1.0 as a Double
const isDigest = (value) => typeof value === 'string' && DIGEST.test(value);
const isIdentifier = (value) => typeof value === 'string' && IDENTIFIER.test(value)
  && value.length <= CONSTANTS.MAX_IDENTIFIER_LENGTH;
const has = (object, key) => Object.hasOwn(object, key);

function hasExactly(object, fields) {
  const keys = Object.keys(object);
  return keys.length === fields.length && fields.every((field) => has(object, field));
}

// ============================================================================================
// 2. Bytes
// ============================================================================================
// Uint8Arrays throughout (node's Buffer is one), searched and compared here rather than with
// Buffer's methods, which a browser lacks.

const UTF8_ENCODER = new TextEncoder();
const utf8 = (text) => UTF8_ENCODER.encode(text);

// Where `needle` first occurs in `haystack` at or after `from`, or -1.
function indexOfBytes(haystack, needle, from = 0) {
  const first = needle[0];
  const last = haystack.length - needle.length;
  for (let at = haystack.indexOf(first, from); at !== -1 && at <= last; at = haystack.indexOf(first, at + 1)) {
    let same = true;
    for (let i = 1; i < needle.length && same; i += 1) same = haystack[at + i] === needle[i];
    if (same) return at;
  }
  return -1;
}

// Where `needle` last occurs in `haystack`, or -1.
function lastIndexOfBytes(haystack, needle) {
  for (let at = haystack.length - needle.length; at >= 0; at -= 1) {
    let same = true;
    for (let i = 0; i < needle.length && same; i += 1) same = haystack[at + i] === needle[i];
    if (same) return at;
  }
  return -1;
}

function concatBytes(parts) {
  const out = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function sameBytes(first, second) {
  if (first.length !== second.length) return false;
  for (let i = 0; i < first.length; i += 1) if (first[i] !== second[i]) return false;
  return true;
}

function endsWith(buffer, suffix) {
  return buffer.length >= suffix.length && sameBytes(buffer.subarray(buffer.length - suffix.length), suffix);
}

// Lowercase hex text (already checked against HEX) to its bytes.
function hexBytes(text) {
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i += 1) out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

// Base64 text (already checked against its pattern) to bytes, and bytes to its one canonical
// spelling: decoding and encoding again is how a spelling with stray bits is told apart.
function base64Bytes(text) {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) out[i] = binary.charCodeAt(i);
  return out;
}

function base64Text(bytes) {
  return btoa(jcs.latin1Text(bytes));
}

function splitLines(data) {
  const lines = [];
  let start = 0;
  for (;;) {
    const end = data.indexOf(0x0a, start);
    if (end === -1) break;
    lines.push(data.subarray(start, end));
    start = end + 1;
  }
  lines.push(data.subarray(start)); // what follows the last newline: empty in a whole log
  return lines;
}

// The newlines in `data`, counted without a view of any line: a file of 256 MiB of newlines is
// 268 million lines, which a list of views would not fit in memory.
function countNewlines(data) {
  let count = 0;
  for (let at = 0; at < data.length; at += 1) if (data[at] === 0x0a) count += 1;
  return count;
}

// Each line ended by a newline, as [position, view], made one at a time (what follows the last
// newline is not one of them).
function* terminatedLines(data) {
  let start = 0;
  for (let position = 0; ; position += 1) {
    const end = data.indexOf(0x0a, start);
    if (end === -1) return;
    yield [position, data.subarray(start, end)];
    start = end + 1;
  }
}

function* sha256(data) {
  return yield { op: 'sha256', data };
}

function* canonicalSha256(value) {
  return yield* sha256(jcs.canonicalBytes(value));
}

// ============================================================================================
// 3. Seal keys
// ============================================================================================

// A seal-keys file's bytes (at most one byte more than MAX_SEAL_KEYS_BYTES read) to its secrets.
function sealKeysFromBytes(data) {
  let document;
  try {
    document = jcs.decodeStrictJson(data, { maxBytes: CONSTANTS.MAX_SEAL_KEYS_BYTES });
  } catch (error) {
    if (error instanceof jcs.JsonError) throw new CatalogError('SEAL_KEYS_INVALID');
    throw error;
  }
  return parseSealKeys(document);
}

function parseSealKeys(document) {
  if (!(isObject(document) && hasExactly(document, SEAL_KEYS_FIELDS)
        && document.format === CONSTANTS.SEAL_KEYS_FORMAT && Array.isArray(document.keys)
        && document.keys.length >= 1 && document.keys.length <= CONSTANTS.MAX_SEAL_KEYS)) {
    throw new CatalogError('SEAL_KEYS_INVALID');
  }
  const secrets = new Map();
  for (const entry of document.keys) {
    if (!(isObject(entry) && hasExactly(entry, SEAL_KEY_FIELDS) && isIdentifier(entry.key_id)
          && !secrets.has(entry.key_id) && typeof entry.secret_hex === 'string' && HEX.test(entry.secret_hex)
          && entry.secret_hex.length >= CONSTANTS.MIN_SEAL_KEY_BYTES * 2
          && entry.secret_hex.length <= CONSTANTS.MAX_SEAL_KEY_BYTES * 2)) {
      throw new CatalogError('SEAL_KEYS_INVALID');
    }
    secrets.set(entry.key_id, hexBytes(entry.secret_hex));
  }
  if (!(typeof document.current === 'string' && secrets.has(document.current))) {
    throw new CatalogError('SEAL_KEYS_INVALID');
  }
  return secrets;
}

// What a seal's HMAC is computed over.
function sealMessage(keyId, purpose, digest) {
  return jcs.canonicalBytes({ domain: CONSTANTS.SEAL_DOMAIN, key_id: keyId, purpose, digest });
}

// true, false, or null when this verifier holds no key of that id. Constant-time on the MAC.
function* sealHolds(secrets, seal, purpose, digest) {
  const keyId = seal.key_id;
  if (typeof keyId !== 'string' || !secrets.has(keyId)) return null;
  const mac = seal.hmac_sha256;
  if (!isDigest(mac)) return false;
  return yield { op: 'hmac-sha256', key: secrets.get(keyId), data: sealMessage(keyId, purpose, digest), mac };
}

// ============================================================================================
// 4. Entries and the chain
// ============================================================================================

const DIGEST_MEMBER = utf8('"entry_sha256":"');
const DOMAIN_MEMBER = utf8(`"domain":${JSON.stringify(CONSTANTS.AUDIT_ENTRY_DOMAIN)},`);
const SEAL_MEMBER = utf8(',"seal":');
const CLOSING_BRACE = utf8('}');
const DIGEST_AND_QUOTE_COMMA = 66; // 64 hex digits, the closing quote and the comma after it

// One line, decoded strictly and held to the entry's exact shape; the seal member, outside the
// entry's digest, to its canonical bytes at the very end of the line.
function auditEntry(line, position) {
  const at = `entries[${position}]`;
  let entry;
  try {
    entry = jcs.decodeStrictJson(line, { maxBytes: CONSTANTS.MAX_AUDIT_LINE_BYTES });
  } catch (error) {
    if (error instanceof jcs.JsonError) throw new CatalogError('AUDIT_MALFORMED', at);
    throw error;
  }
  const closing = isObject(entry) && has(entry, 'closed');
  if (!(isObject(entry) && hasExactly(entry, closing ? CLOSING_FIELDS : ENTRY_FIELDS)
        && entry.format === CONSTANTS.AUDIT_LOG_FORMAT
        && isInteger(entry.index) && entry.index >= 0 && entry.index <= CONSTANTS.MAX_AUDIT_ENTRIES
        && isDigest(entry.previous_sha256) && isDigest(entry.entry_sha256)
        && (!closing || entry.closed === true) && (closing || isObject(entry.package))
        && isObject(entry.seal) && hasExactly(entry.seal, SEAL_FIELDS)
        && indexOfBytes(line, DIGEST_MEMBER) !== -1 && line[0] === 0x7b
        && endsWith(line, concatBytes([SEAL_MEMBER, jcs.canonicalBytes(entry.seal), CLOSING_BRACE])))) {
    throw new CatalogError('AUDIT_MALFORMED', at);
  }
  return entry;
}

// The entry's digest from the line's own bytes: its entry_sha256 member replaced by the domain
// member (which sorts right there) and its seal member dropped. A line in any other spelling than
// the canonical one hashes to another digest.
function* lineDigest(line) {
  const start = indexOfBytes(line, DIGEST_MEMBER);
  const end = lastIndexOfBytes(line, SEAL_MEMBER);
  const body = concatBytes([
    line.subarray(0, start), DOMAIN_MEMBER,
    line.subarray(start + DIGEST_MEMBER.length + DIGEST_AND_QUOTE_COMMA, end), CLOSING_BRACE,
  ]);
  return yield* sha256(body);
}

// The entry's digest from its decoded members, by the definition: SHA-256 of the canonical body
// (every member but entry_sha256 and seal) with the domain member added.
function* entryDigest(entry) {
  const body = Object.create(null); // no prototype: a "__proto__" member is a member
  body.domain = CONSTANTS.AUDIT_ENTRY_DOMAIN;
  for (const key of Object.keys(entry)) {
    if (key !== 'entry_sha256' && key !== 'seal') body[key] = entry[key];
  }
  return yield* canonicalSha256(body);
}

function* checkEntrySeal(entry, digest, secrets, required, at, inserted) {
  const seal = entry.seal;
  if (seal.key_id === null) {
    if (required) throw new CatalogError('AUDIT_UNSEALED', at);
    return;
  }
  if (secrets === null) return;
  const holds = yield* sealHolds(secrets, seal, 'audit-entry', digest);
  if (holds === null) throw new CatalogError('AUDIT_KEY_UNKNOWN', at);
  // Recomputed by someone without the key: a forged entry beside a real one, or an edit.
  if (!holds) throw new CatalogError(inserted ? 'AUDIT_ENTRY_INSERTED' : 'AUDIT_ENTRY_EDITED', at);
}

// The whole log, or a CatalogError naming its first bad entry; the report holds the chain's heads
// after each entry too, for the checkpoints. In the module's order: every line decoded and held to
// an entry's shape before any link is judged, and every link before any package. No decoded
// entry is kept from one line to the next (a 64 KiB line of "[{},{},...]" decodes to 20,000
// objects, a whole log to more than memory holds): the first pass keeps each entry's index, the
// second decodes each line again (the same bytes, the same value) for its links, its seal and its
// package, and names the first package that fails only once the whole chain has held.
function* verifyAuditLog(data, { secrets = null, requireSeal = false } = {}) {
  if (data.length > CONSTANTS.MAX_AUDIT_LOG_BYTES) throw new CatalogError('AUDIT_LOG_UNREADABLE');
  const count = countNewlines(data);
  if (data.length > 0 && data[data.length - 1] !== 0x0a) {
    throw new CatalogError('AUDIT_TRUNCATED', `entries[${count}]`); // the last line was cut
  }
  if (count > CONSTANTS.MAX_AUDIT_ENTRIES + 1) {
    throw new CatalogError('AUDIT_MALFORMED', `entries[${CONSTANTS.MAX_AUDIT_ENTRIES + 1}]`);
  }
  const indices = [];
  let closedAt = -1; // the position of the last closing entry
  for (const [position, line] of terminatedLines(data)) {
    const entry = auditEntry(line, position);
    indices.push(entry.index);
    if (has(entry, 'closed')) closedAt = position;
  }
  const later = new Map(); // index -> the last position it appears at
  indices.forEach((index, position) => later.set(index, position));
  const heads = [];
  let previous = CONSTANTS.GENESIS_SHA256;
  let sealed = secrets !== null;
  let packageFault = -1; // the first package that does not hold its own digests
  for (const [position, line] of terminatedLines(data)) {
    const entry = auditEntry(line, position);
    const at = `entries[${position}]`;
    const index = entry.index;
    if (index < position) throw new CatalogError('AUDIT_ENTRY_INSERTED', at); // an index seen again
    if (index > position) {
      const moved = (later.has(position) ? later.get(position) : -1) > position; // it comes later
      throw new CatalogError(moved ? 'AUDIT_ENTRY_REORDERED' : 'AUDIT_ENTRY_DELETED', at);
    }
    if (entry.previous_sha256 !== previous) {
      // This entry still names the digest its predecessor had: the predecessor changed.
      throw new CatalogError('AUDIT_ENTRY_EDITED', `entries[${Math.max(position - 1, 0)}]`);
    }
    const digest = yield* lineDigest(line);
    if (digest !== entry.entry_sha256) throw new CatalogError('AUDIT_ENTRY_EDITED', at);
    const inserted = position + 1 < indices.length && indices[position + 1] === index;
    yield* checkEntrySeal(entry, digest, secrets, requireSeal, at, inserted);
    if (has(entry, 'closed') && position !== count - 1) {
      throw new CatalogError('AUDIT_MALFORMED', at); // nothing follows the closing entry
    }
    if (entry.seal.key_id === null) sealed = false;
    if (packageFault === -1 && has(entry, 'package') && !(yield* packageDigestsHold(entry.package))) {
      packageFault = position;
    }
    previous = digest;
    heads.push(digest);
  }
  if (count === 0 || closedAt !== count - 1) {
    throw new CatalogError('AUDIT_TRUNCATED', `entries[${count}]`);
  }
  // The chain holds: every package is as written. Now the first not held to its own digests.
  if (packageFault !== -1) throw new CatalogError('AUDIT_PACKAGE_DIGEST', `entries[${packageFault}]`);
  return { entries: count - 1, head_sha256: previous, sealed, heads };
}

// ============================================================================================
// 5. Package digests
// ============================================================================================
// Each digest is SHA-256 over the canonical text of a domain-separated envelope, recomputed from
// the package alone: its own tool contract, never a registry.

// [request, result, call binding], or null where the package lacks what they are computed from.
function* packageDigests(pkg) {
  if (!isObject(pkg) || !has(pkg, 'protected_audit')) return null;
  const audit = pkg.protected_audit;
  if (!isObject(audit) || !has(audit, 'tool_contract')) return null;
  const contract = audit.tool_contract;
  if (!(contract === null || (isObject(contract) && Object.keys(NULL_CONTRACT).every((key) => has(contract, key))))) {
    return null; // {} would digest as no contract at all
  }
  const needed = [[audit, 'principal'], [audit, 'arguments'], [pkg, 'model_result'], [audit, 'provider_context'],
    [audit, 'downstream'], [audit, 'approval'], [pkg, 'execution'], [audit, 'redactions'], [audit, 'resource_revision']];
  if (!needed.every(([object, key]) => has(object, key))) return null;
  const view = contract === null ? NULL_CONTRACT : contract;
  const request = yield* canonicalSha256({
    domain: CONSTANTS.REQUEST_DIGEST_DOMAIN,
    principal: audit.principal,
    tool: view.tool,
    arguments: audit.arguments,
    input_revision: view.input_revision,
    output_revision: view.output_revision,
    effect_revision: view.effect_revision,
  });
  const result = yield* canonicalSha256({ domain: CONSTANTS.RESULT_DIGEST_DOMAIN, model_result: pkg.model_result });
  const binding = yield* canonicalSha256({
    domain: CONSTANTS.CALL_BINDING_DIGEST_DOMAIN,
    provider_context: audit.provider_context,
    tool_contract: contract,
    request_sha256: request,
    result_sha256: result,
    downstream: audit.downstream,
    approval: audit.approval,
    evidence: { execution: pkg.execution, redactions: audit.redactions, resource_revision: audit.resource_revision },
  });
  return [request, result, binding];
}

function* packageDigestsHold(pkg) {
  const audit = pkg.protected_audit;
  if (!isObject(audit) || !DIGESTED_AUDIT_FIELDS.every((field) => has(audit, field))) return false;
  const digests = yield* packageDigests(pkg);
  return digests !== null && digests[0] === audit.request_sha256 && digests[1] === audit.result_sha256
    && digests[2] === audit.call_binding_sha256;
}

// ============================================================================================
// 6. Checkpoints
// ============================================================================================
// Ed25519 signatures over the chain's head after a number of entries, in LOG.checkpoints, one
// canonical line each: {"entries", "format", "head_sha256", "key_id", "signature_ed25519"}.
// The signed message is the canonical text of {"domain", "entries", "head_sha256", "key_id"}.

const CHECKPOINT_FIELDS = Object.freeze(['format', 'entries', 'head_sha256', 'key_id', 'signature_ed25519']);
const SIGNATURE_TEXT = /^[A-Za-z0-9+/]{86}==$/; // 64 bytes, standard alphabet, padded
const KEY_ID = /^[0-9a-f]{16}$/;
const PUBLIC_PEM = /^-----BEGIN PUBLIC KEY-----\n([A-Za-z0-9+/=\n]{1,200})-----END PUBLIC KEY-----\n?$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})+(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const ED25519_PUBLIC_KEY_BYTES = 32;
const ED25519_SPKI_PREFIX = hexBytes(CHECKPOINT_CONSTANTS.ED25519_SPKI_PREFIX);
const ED25519_SMALL_ORDER_Y = CHECKPOINT_CONSTANTS.ED25519_SMALL_ORDER_Y.map(hexBytes);

// Whether 32 raw key bytes spell a point of small order (x's sign bit, the top bit, ignored).
function isSmallOrder(raw) {
  const cleared = Uint8Array.from(raw);
  cleared[cleared.length - 1] &= 0x7f;
  return ED25519_SMALL_ORDER_Y.some((y) => sameBytes(y, cleared));
}

// A public key file's bytes (at most one byte more than MAX_KEY_FILE_BYTES read): exactly one
// Ed25519 SubjectPublicKeyInfo PEM block, parsed here byte for byte as the Python layer parses it
// (a crypto library's own parser would also take a private key, and text around the block).
function* publicKeyFromBytes(data) {
  const match = PUBLIC_PEM.exec(jcs.latin1Text(data));
  const body = match === null ? '' : match[1].replace(/\n/g, '');
  if (data.length > CHECKPOINT_CONSTANTS.MAX_KEY_FILE_BYTES || !BASE64.test(body)) {
    throw new CatalogError('PUBLIC_KEY_INVALID');
  }
  const der = base64Bytes(body);
  if (base64Text(der) !== body || der.length !== ED25519_SPKI_PREFIX.length + ED25519_PUBLIC_KEY_BYTES
      || !sameBytes(der.subarray(0, ED25519_SPKI_PREFIX.length), ED25519_SPKI_PREFIX)
      || isSmallOrder(der.subarray(ED25519_SPKI_PREFIX.length))) {
    throw new CatalogError('PUBLIC_KEY_INVALID');
  }
  const key = yield { op: 'ed25519-key', spki: der };
  if (key === null) throw new CatalogError('PUBLIC_KEY_INVALID');
  const raw = der.subarray(ED25519_SPKI_PREFIX.length);
  return { key, keyId: (yield* sha256(raw)).slice(0, CHECKPOINT_CONSTANTS.KEY_ID_HEX) };
}

// One spelling per signature: the standard base64 of 64 bytes, its unused bits zero.
function isSignatureText(text) {
  return typeof text === 'string' && SIGNATURE_TEXT.test(text) && base64Text(base64Bytes(text)) === text;
}

function checkpointEntry(line, position) {
  const at = `checkpoints[${position}]`;
  let checkpoint;
  try {
    checkpoint = jcs.decodeStrictJson(line, { maxBytes: CHECKPOINT_CONSTANTS.MAX_CHECKPOINT_LINE_BYTES });
  } catch (error) {
    if (error instanceof jcs.JsonError) throw new CatalogError('CHECKPOINT_MALFORMED', at);
    throw error;
  }
  if (!(isObject(checkpoint) && hasExactly(checkpoint, CHECKPOINT_FIELDS)
        && checkpoint.format === CHECKPOINT_CONSTANTS.CHECKPOINT_FORMAT
        && isInteger(checkpoint.entries) && checkpoint.entries >= 1
        && checkpoint.entries <= CHECKPOINT_CONSTANTS.MAX_CHAIN_LINES
        && isDigest(checkpoint.head_sha256)
        && typeof checkpoint.key_id === 'string' && KEY_ID.test(checkpoint.key_id)
        && isSignatureText(checkpoint.signature_ed25519)
        && sameBytes(line, jcs.canonicalBytes(checkpoint)))) {
    throw new CatalogError('CHECKPOINT_MALFORMED', at);
  }
  return checkpoint;
}

function signedMessage(checkpoint) {
  return jcs.canonicalBytes({
    domain: CHECKPOINT_CONSTANTS.CHECKPOINT_DOMAIN, entries: checkpoint.entries,
    head_sha256: checkpoint.head_sha256, key_id: checkpoint.key_id,
  });
}

// Every checkpoint in order, each a valid signature over the head the chain really had after
// its count of entries (the closing entry counts: the last checkpoint signs the closing head).
function* verifyCheckpoints(data, heads, publicKey) {
  if (data.length > 0 && data[data.length - 1] !== 0x0a) {
    throw new CatalogError('CHECKPOINT_MALFORMED', `checkpoints[${countNewlines(data)}]`); // cut short
  }
  const checkpoints = [];
  for (const [position, line] of terminatedLines(data)) checkpoints.push(checkpointEntry(line, position));
  let last = 0;
  for (const [position, checkpoint] of checkpoints.entries()) {
    const at = `checkpoints[${position}]`;
    if (checkpoint.key_id !== publicKey.keyId) throw new CatalogError('CHECKPOINT_KEY_UNKNOWN', at);
    const signature = base64Bytes(checkpoint.signature_ed25519);
    if (!(yield { op: 'ed25519-verify', key: publicKey.key, data: signedMessage(checkpoint), signature })) {
      throw new CatalogError('CHECKPOINT_SIGNATURE_INVALID', at);
    }
    if (checkpoint.entries <= last) throw new CatalogError('CHECKPOINT_ORDER', at);
    if (checkpoint.entries > heads.length) throw new CatalogError('CHECKPOINT_BEYOND_LOG', at);
    if (checkpoint.head_sha256 !== heads[checkpoint.entries - 1]) throw new CatalogError('CHECKPOINT_HEAD_MISMATCH', at);
    last = checkpoint.entries;
  }
  if (last !== heads.length) throw new CatalogError('CHECKPOINT_MISSING_CLOSE', `checkpoints[${checkpoints.length}]`);
  return checkpoints.length;
}

// ============================================================================================
// 7. The command line's answers
// ============================================================================================
// What `--verify-audit` prints and the status it exits with, as a value {status, output}: 0 and
// the report, 1 and the first bad line, by its position in the file. A refusal of a file or a key
// (status 2) is thrown as a CatalogError; errorAnswer makes it the answer printed.

function failedAnswer(error, prefix) {
  const index = Number(error.at.slice(prefix.length, -1));
  return { status: 1, output: { passed: false, failure: { index, ...error.toJSON() } } };
}

// Anything but a CatalogError is a bug: INTERNAL_ERROR, never its text.
function errorAnswer(error) {
  return { status: 2, output: { passed: false, error: (error instanceof CatalogError ? error : new CatalogError('INTERNAL_ERROR')).toJSON() } };
}

// A log's bytes (at most one byte more than MAX_AUDIT_LOG_BYTES read) and the seal keys, or null.
function* verifyAnswer(data, secrets) {
  let report;
  try {
    report = yield* verifyAuditLog(data, { secrets, requireSeal: secrets !== null });
  } catch (error) {
    if (!(error instanceof CatalogError) || error.code === 'AUDIT_LOG_UNREADABLE') throw error;
    return failedAnswer(error, 'entries[');
  }
  return { status: 0, output: { passed: true, entries: report.entries, head_sha256: report.head_sha256, sealed: report.sealed } };
}

// As signatures/audit_signatures.py --verify-audit LOG --public-key PUB.pem: the log with no seal
// keys (a third party holds none), then every checkpoint. `checkpoints` is the checkpoint file's
// bytes (at most one byte more than MAX_CHECKPOINTS_BYTES read), or null when it could not be read.
function* signedVerifyAnswer(data, publicKey, checkpoints) {
  let report;
  try {
    report = yield* verifyAuditLog(data, {});
  } catch (error) {
    if (!(error instanceof CatalogError) || error.code === 'AUDIT_LOG_UNREADABLE') throw error;
    return failedAnswer(error, 'entries[');
  }
  if (checkpoints === null || checkpoints.length > CHECKPOINT_CONSTANTS.MAX_CHECKPOINTS_BYTES) {
    throw new CatalogError('CHECKPOINTS_UNREADABLE');
  }
  let count;
  try {
    count = yield* verifyCheckpoints(checkpoints, report.heads, publicKey);
  } catch (error) {
    if (!(error instanceof CatalogError)) throw error;
    return failedAnswer(error, 'checkpoints[');
  }
  return { status: 0, output: { passed: true, entries: report.entries, head_sha256: report.head_sha256,
    checkpoints: count, key_id: publicKey.keyId } };
}

// As the module's emit_json: two-space indent, ASCII only (every text printed here is ASCII).
function answerText(output) {
  return `${JSON.stringify(output, null, 2)}\n`;
}

// ============================================================================================
// 8. Running the steps
// ============================================================================================
// A generator above yields each crypto request and gets its answer back; these drive one to its
// end. `answer(request)` returns the answer (runSync) or a promise of it (runAsync). An error
// thrown by the rules or by `answer` comes out of the run as it is.

function runSync(steps, answer) {
  let step = steps.next();
  while (!step.done) step = steps.next(answer(step.value));
  return step.value;
}

async function runAsync(steps, answer) {
  let step = steps.next();
  while (!step.done) step = steps.next(await answer(step.value));
  return step.value;
}

const API = Object.freeze({
  CONSTANTS, MESSAGES, CHECKPOINT_MESSAGES, CHECKPOINT_CONSTANTS, CatalogError, isObject, splitLines,
  sealKeysFromBytes, parseSealKeys, sealMessage, auditEntry, lineDigest, entryDigest, verifyAuditLog,
  packageDigests, publicKeyFromBytes, signedMessage, verifyCheckpoints, verifyAnswer, signedVerifyAnswer,
  errorAnswer, answerText, runSync, runAsync,
});
if (typeof module === 'object' && module !== null && typeof module.exports === 'object') {
  module.exports = API;
} else {
  globalThis.ToolDispatcherAuditCore = API;
}
