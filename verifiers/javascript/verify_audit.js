#!/usr/bin/env node
// A second verifier of tool-dispatcher audit logs, in JavaScript with node's standard library only.
//
//   node verifiers/javascript/verify_audit.js --verify-audit LOG [--seal-key KEYS.json]
//   node verifiers/javascript/verify_audit.js --verify-audit LOG --public-key PUB.pem
//   node verifiers/javascript/verify_audit.js --digests LOG
//
// --verify-audit answers exactly what `python -B tool_dispatcher.py --verify-audit` answers on
// the same bytes and command line: the same stdout, byte for byte, and the same exit status
// (0 passed, 1 the log was refused at its first bad entry, 2 the command line, the key file or
// the log's file was refused). It shares no code with the Python module: every rule is written
// again from the module's definitions, in audit_core.js (which viewer/audit-viewer.html runs in a
// browser too), and verifiers/run.sh holds the two to agreement. This file is node's side of it:
// reading files, node:crypto's answers to the rules' digests, MACs and signatures, and the
// command line. With --public-key it also checks the Ed25519 checkpoints beside the log
// (LOG.checkpoints), as signatures/audit_signatures.py does. --digests prints, a line each, every
// digest recomputed from the log's entries, for a diff against verifiers/python_digests.py.
//
// Sections: 1. node's answers to the rules; 2. reading files; 3. the command line.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const jcs = require('./jcs.js');
const core = require('./audit_core.js');

const { CONSTANTS, CHECKPOINT_CONSTANTS, CatalogError } = core;

// ============================================================================================
// 1. Node's answers to the rules
// ============================================================================================
// audit_core.js asks for each digest, MAC and signature check; node:crypto answers at once, so
// every rule runs synchronously here (core.runSync) and the functions below keep the plain
// call-and-return shape the tests and cross_check.js use.

function answer(request) {
  switch (request.op) {
    case 'sha256':
      return crypto.createHash('sha256').update(request.data).digest('hex');
    case 'hmac-sha256': {
      const expected = crypto.createHmac('sha256', request.key).update(request.data).digest();
      return crypto.timingSafeEqual(Buffer.from(request.mac, 'hex'), expected);
    }
    case 'ed25519-key':
      try {
        return crypto.createPublicKey({ key: Buffer.from(request.spki), format: 'der', type: 'spki' });
      } catch {
        return null;
      }
    case 'ed25519-verify':
      return crypto.verify(null, request.data, request.key, request.signature);
    default:
      throw new TypeError('unknown request');
  }
}

const run = (steps) => core.runSync(steps, answer);
const verifyAuditLog = (data, options) => run(core.verifyAuditLog(data, options));
const verifyCheckpoints = (data, heads, publicKey) => run(core.verifyCheckpoints(data, heads, publicKey));
const packageDigests = (pkg) => run(core.packageDigests(pkg));
const entryDigest = (entry) => run(core.entryDigest(entry));
const lineDigest = (line) => run(core.lineDigest(line));

// ============================================================================================
// 2. Reading files
// ============================================================================================
// As the module's read_bounded: a regular file only (a FIFO is opened without waiting and then
// refused), at most one byte more than the limit read, any failure one answer.

const READ_CHUNK = 1024 * 1024;

function readBounded(path, maxBytes) {
  if (typeof path !== 'string' || path.includes('\0')) return null;
  let handle;
  try {
    handle = fs.openSync(path, fs.constants.O_RDONLY | (fs.constants.O_NONBLOCK || 0));
  } catch {
    return null;
  }
  try {
    if (!fs.fstatSync(handle).isFile()) return null;
    const chunks = [];
    let total = 0;
    while (total <= maxBytes) {
      const chunk = Buffer.alloc(Math.min(READ_CHUNK, maxBytes + 1 - total));
      const count = fs.readSync(handle, chunk, 0, chunk.length, null);
      if (count === 0) break;
      chunks.push(chunk.subarray(0, count));
      total += count;
    }
    return Buffer.concat(chunks, total);
  } catch {
    return null;
  } finally {
    fs.closeSync(handle);
  }
}

function readAuditLog(path) {
  const data = readBounded(path, CONSTANTS.MAX_AUDIT_LOG_BYTES);
  if (data === null || data.length > CONSTANTS.MAX_AUDIT_LOG_BYTES) throw new CatalogError('AUDIT_LOG_UNREADABLE');
  return data;
}

function loadSealKeys(path) {
  const data = readBounded(path, CONSTANTS.MAX_SEAL_KEYS_BYTES);
  if (data === null) throw new CatalogError('SEAL_KEYS_UNREADABLE');
  return core.sealKeysFromBytes(data);
}

function loadPublicKey(path) {
  const data = readBounded(path, CHECKPOINT_CONSTANTS.MAX_KEY_FILE_BYTES);
  if (data === null) throw new CatalogError('PUBLIC_KEY_UNREADABLE');
  return run(core.publicKeyFromBytes(data));
}

// ============================================================================================
// 3. The command line
// ============================================================================================
// The Python CLI parses with argparse; these rules give the same verdict on every command line
// holding --verify-audit: an option's value is the next argument unless that one looks like an
// option itself; "--name=value" works too; anything else is CLI_USAGE. --help prints this usage.

const OPTIONS = Object.freeze(new Set(['--verify-audit', '--seal-key', '--public-key', '--digests']));
// Every option string the Python CLIs' parsers hold (tool_dispatcher.py's, and --public-key of
// signatures/audit_signatures.py), with ours: argparse reads an argument that names one of them
// as an option, even with a space in it ("--seal-key=a b"), so it is never a value.
const KNOWN_OPTIONS = Object.freeze(new Set([...OPTIONS, '-h', '--help', '--fixture', '--check-contracts', '--overlay',
  '--case', '--report', '--audit-log']));
// argparse's pattern (Python's \d is any decimal digit, and its $ also matches before a final newline).
const NEGATIVE_NUMBER = /^-\p{Nd}+\n?$|^-\p{Nd}*\.\p{Nd}+\n?$/u; // argparse reads these as values, not options
const USAGE = 'usage: verify_audit.js --verify-audit LOG [--seal-key KEYS.json | --public-key PUB.pem]\n'
  + '       verify_audit.js --digests LOG\n';

// argparse's _parse_optional, in its order, for a parser whose only short option is -h and which
// takes no abbreviation: does this argument start an option (and so cannot be a value)?
function looksLikeOption(argument) {
  if (argument === '' || argument[0] !== '-') return false;
  if (KNOWN_OPTIONS.has(argument)) return true;
  if (argument.length === 1) return false;
  if (argument.includes('=') && KNOWN_OPTIONS.has(argument.slice(0, argument.indexOf('=')))) return true;
  if (argument[1] !== '-' && argument.startsWith('-h')) return true; // -h with text after it, as -hx
  if (NEGATIVE_NUMBER.test(argument) || argument.includes(' ')) return false;
  return true;
}

function parseArguments(argv) {
  const given = Object.create(null);
  for (let i = 0; i < argv.length; i += 1) {
    const argument = argv[i];
    if (argument === '--help' || argument === '-h') return { help: true };
    const equals = argument.indexOf('=');
    const name = argument.startsWith('--') && equals > 0 ? argument.slice(0, equals) : argument;
    if (!OPTIONS.has(name)) throw new CatalogError('CLI_USAGE');
    if (name !== argument) {
      given[name] = argument.slice(equals + 1);
    } else {
      if (i + 1 >= argv.length || looksLikeOption(argv[i + 1])) throw new CatalogError('CLI_USAGE');
      given[name] = argv[i + 1];
      i += 1;
    }
  }
  const verify = given['--verify-audit'];
  const digests = given['--digests'];
  if ((verify === undefined) === (digests === undefined)) throw new CatalogError('CLI_USAGE');
  if (digests !== undefined && (given['--seal-key'] !== undefined || given['--public-key'] !== undefined)) {
    throw new CatalogError('CLI_USAGE');
  }
  if (given['--seal-key'] !== undefined && given['--public-key'] !== undefined) throw new CatalogError('CLI_USAGE');
  return { verify, digests, sealKey: given['--seal-key'], publicKey: given['--public-key'] };
}

function emit(value) {
  process.stdout.write(core.answerText(value));
}

function verifyCommand(path, sealKeyPath) {
  // Without --seal-key the Python CLI takes the file the environment names, if it names one.
  const fromEnvironment = process.env[CONSTANTS.SEAL_KEYS_ENVIRONMENT];
  const keysPath = sealKeyPath !== undefined ? sealKeyPath : (fromEnvironment || undefined);
  const secrets = keysPath === undefined ? null : loadSealKeys(keysPath);
  const { status, output } = run(core.verifyAnswer(readAuditLog(path), secrets));
  emit(output);
  return status;
}

function signedVerifyCommand(path, publicKeyPath) {
  const publicKey = loadPublicKey(publicKeyPath);
  const data = readAuditLog(path);
  const checkpoints = readBounded(path + CHECKPOINT_CONSTANTS.CHECKPOINTS_SUFFIX, CHECKPOINT_CONSTANTS.MAX_CHECKPOINTS_BYTES);
  const { status, output } = run(core.signedVerifyAnswer(data, publicKey, checkpoints));
  emit(output);
  return status;
}

// One canonical line a line of the log: its position and every digest recomputed from its
// members by the definitions (null where a line does not decode, or its package lacks a member).
function digestsCommand(path) {
  const lines = core.splitLines(readAuditLog(path));
  if (lines[lines.length - 1].length === 0) lines.pop();
  const out = lines.map((line, index) => {
    const row = { index, entry_sha256: null, request_sha256: null, result_sha256: null, call_binding_sha256: null };
    let entry;
    try {
      entry = jcs.decodeStrictJson(line, { maxBytes: CONSTANTS.MAX_AUDIT_LINE_BYTES });
    } catch (error) {
      if (error instanceof jcs.JsonError) return jcs.canonicalText(row);
      throw error;
    }
    if (!core.isObject(entry)) return jcs.canonicalText(row);
    row.entry_sha256 = entryDigest(entry);
    const digests = Object.hasOwn(entry, 'package') ? packageDigests(entry.package) : null;
    if (digests !== null) [row.request_sha256, row.result_sha256, row.call_binding_sha256] = digests;
    return jcs.canonicalText(row);
  });
  process.stdout.write(out.map((line) => `${line}\n`).join(''));
  return 0;
}

function main(argv) {
  try {
    const options = parseArguments(argv);
    if (options.help) {
      process.stdout.write(USAGE);
      return 0;
    }
    if (options.digests !== undefined) return digestsCommand(options.digests);
    if (options.publicKey !== undefined) return signedVerifyCommand(options.verify, options.publicKey);
    return verifyCommand(options.verify, options.sealKey);
  } catch (error) {
    // One failure shape for the command line, a key file or an unreadable log; INTERNAL_ERROR
    // for anything unforeseen, never a stack trace.
    const { status, output } = core.errorAnswer(error);
    emit(output);
    return status;
  }
}

if (require.main === module) {
  process.exitCode = main(process.argv.slice(2));
}

module.exports = {
  CONSTANTS, MESSAGES: core.MESSAGES, CHECKPOINT_MESSAGES: core.CHECKPOINT_MESSAGES, CHECKPOINT_CONSTANTS,
  CatalogError, verifyAuditLog, verifyCheckpoints, loadPublicKey, packageDigests, entryDigest, lineDigest,
  parseSealKeys: core.parseSealKeys, signedMessage: core.signedMessage, run: main,
};
