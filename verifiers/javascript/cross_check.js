#!/usr/bin/env node
// The JavaScript half of the differential checks in verifiers/run.sh; verifiers/python_cross_check.py
// is the Python half, and the two outputs must be the same bytes.
//
//   node cross_check.js constants                       the tables verify_audit.js copied from the module
//   node cross_check.js decode CASES                    each case's decoding: a typed view, or its code
//   node cross_check.js mutate-lines LOG COUNT SEED     decode cases: the log's lines, each with one fault
//   node cross_check.js mutate-log LOG COUNT SEED       edit lists for whole copies of the log
//   node cross_check.js verify-batch LOG EDITS [KEYS]   each edited copy's verdict and digests
'use strict';

const fs = require('node:fs');
const jcs = require('./jcs.js');
const audit = require('./verify_audit.js');

const MASK64 = (1n << 64n) - 1n;

// SplitMix64, as verifiers/vectors/make_numbers.js: a fixed seed gives the same cases everywhere.
function generator(seed) {
  let state = BigInt(seed) & MASK64;
  const next = () => {
    state = (state + 0x9e3779b97f4a7c15n) & MASK64;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
    return z ^ (z >> 31n);
  };
  return { below: (n) => Number(next() % BigInt(n)), pick: (items) => items[Number(next() % BigInt(items.length))] };
}

// Single bytes and short texts that hit the decoder's rules: structure, escapes, numbers, UTF-8.
const BYTES = Buffer.from('"\\{}[]:,0123456789.eE+-u ntfaN\t\r/', 'latin1');
const RAW = [0x00, 0x1f, 0x7f, 0x80, 0xc3, 0xed, 0xef, 0xf4, 0xff];
const SNIPPETS = [
  '\\ud800', '\\udc00', '\\ud83d\\ude00', '\\u00e9', '\\"', '\\\\', '\\x', '\\u12', '1e400', '-1e400', 'NaN',
  '-Infinity', 'Infinity', '9007199254740993', '9007199254740991', '-9007199254740992', '12345678901234567',
  '1.0', '-0', '-0.0', '1e-400', '0.1', '01', '1.', '1e', '.5', '"a":1,"a":2', '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[',
  ']]]]', '{}', '[]', 'null', 'true', ',', '\ufeff', '\u2028', '\ud83d\ude00', ' ',
];

function typedView(value) {
  // The decoded value with its number types visible: an integer is "i", a float "f".
  if (value === null || value === true || value === false) return String(value);
  if (typeof value === 'number') return `i${jcs.numberText(value)}`;
  if (value instanceof jcs.Double) return `f${jcs.numberText(value.value)}`;
  if (typeof value === 'string') return jcs.canonicalText(value);
  if (Array.isArray(value)) return `[${value.map(typedView).join(',')}]`;
  return `{${Object.keys(value).sort().map((key) => `${jcs.canonicalText(key)}:${typedView(value[key])}`).join(',')}}`;
}

function caseBytes(item) {
  return item.hex !== undefined ? Buffer.from(item.hex, 'hex') : Buffer.from(item.text, 'utf8');
}

function decodeCases(path) {
  const document = JSON.parse(fs.readFileSync(path, 'utf8'));
  const out = document.cases.map((item) => {
    let verdict;
    try {
      verdict = typedView(jcs.decodeStrictJson(caseBytes(item), {
        maxBytes: item.max_bytes ?? 65_536, maxDepth: item.max_depth ?? 32,
      }));
    } catch (error) {
      if (!(error instanceof jcs.JsonError)) throw error;
      verdict = error.code;
    }
    return `${item.name}\t${verdict}\n`;
  });
  process.stdout.write(out.join(''));
}

function mutated(line, random) {
  const at = random.below(line.length + 1);
  switch (random.below(5)) {
    case 0: {
      const copy = Buffer.from(line);
      if (copy.length) copy[Math.min(at, copy.length - 1)] = random.below(4) ? random.pick(BYTES) : random.pick(RAW);
      return copy;
    }
    case 1:
      return Buffer.concat([line.subarray(0, at), line.subarray(at + 1 + random.below(3))]);
    case 2:
      return Buffer.concat([line.subarray(0, at), Buffer.from(random.pick(SNIPPETS), 'utf8'), line.subarray(at)]);
    case 3: {
      const end = Math.min(line.length, at + 1 + random.below(64));
      return Buffer.concat([line.subarray(0, end), line.subarray(at, end), line.subarray(end)]);
    }
    default:
      return line.subarray(0, at);
  }
}

function mutateLines(logPath, count, seed) {
  const lines = fs.readFileSync(logPath).toString('latin1').split('\n').filter(Boolean)
    .map((line) => Buffer.from(line, 'latin1'));
  const random = generator(seed);
  const cases = [];
  for (let i = 0; i < count; i += 1) {
    cases.push({ name: `mutation-${i}`, hex: mutated(random.pick(lines), random).toString('hex') });
  }
  process.stdout.write(`${JSON.stringify({ format: 'strict-json-cases-v1', cases }, null, 0)}\n`);
}

// Edits of a whole log: byte edits at one place, or the lines rearranged (one dropped, one
// repeated, two swapped, one moved). Each edit list is applied in order by both halves.
function mutateLog(logPath, count, seed) {
  const data = fs.readFileSync(logPath);
  const lineCount = data.toString('latin1').split('\n').length; // the empty piece after the last newline too
  const random = generator(seed);
  const edits = [];
  for (let i = 0; i < count; i += 1) {
    const at = random.below(data.length);
    const order = Array.from({ length: lineCount }, (_, index) => index);
    const first = random.below(lineCount - 1);
    const second = random.below(lineCount - 1);
    let edit;
    switch (random.below(7)) {
      case 0: edit = ['replace', at, Buffer.from([random.below(3) ? random.pick(BYTES) : random.pick(RAW)]).toString('hex')]; break;
      case 1: edit = ['delete', at, 1 + random.below(4)]; break;
      case 2: edit = ['insert', at, Buffer.from(random.pick(SNIPPETS), 'utf8').toString('hex')]; break;
      case 3: order.splice(first, 1); edit = ['lines', order, null]; break;
      case 4: order.splice(second, 0, first); edit = ['lines', order, null]; break;
      case 5: [order[first], order[second]] = [order[second], order[first]]; edit = ['lines', order, null]; break;
      default: order.splice(second, 0, order.splice(first, 1)[0]); edit = ['lines', order, null]; break;
    }
    edits.push({ name: `log-${i}`, edits: [edit] });
  }
  process.stdout.write(`${JSON.stringify({ format: 'audit-log-edits-v1', cases: edits })}\n`);
}

function applyEdits(data, edits) {
  let out = data;
  for (const [kind, first, second] of edits) {
    if (kind === 'replace') {
      out = Buffer.concat([out.subarray(0, first), Buffer.from(second, 'hex'), out.subarray(first + second.length / 2)]);
    } else if (kind === 'delete') {
      out = Buffer.concat([out.subarray(0, first), out.subarray(first + second)]);
    } else if (kind === 'insert') {
      out = Buffer.concat([out.subarray(0, first), Buffer.from(second, 'hex'), out.subarray(first)]);
    } else {
      const lines = out.toString('latin1').split('\n');
      out = Buffer.from(first.map((index) => lines[index]).join('\n'), 'latin1');
    }
  }
  return out;
}

function verifyBatch(logPath, editsPath, keysPath) {
  const data = fs.readFileSync(logPath);
  const secrets = keysPath === undefined ? null : audit.parseSealKeys(
    jcs.decodeStrictJson(fs.readFileSync(keysPath), { maxBytes: audit.CONSTANTS.MAX_SEAL_KEYS_BYTES }));
  const out = [];
  for (const item of JSON.parse(fs.readFileSync(editsPath, 'utf8')).cases) {
    const edited = applyEdits(data, item.edits);
    let verdict;
    try {
      const report = audit.verifyAuditLog(edited, { secrets, requireSeal: secrets !== null });
      verdict = { passed: true, entries: report.entries, head_sha256: report.head_sha256, sealed: report.sealed };
    } catch (error) {
      if (!(error instanceof audit.CatalogError)) throw error;
      verdict = { passed: false, ...error.toJSON() };
    }
    out.push(`${item.name}\t${jcs.canonicalText(verdict)}\n`);
  }
  process.stdout.write(out.join(''));
}

function main(argv) {
  const [command, ...rest] = argv;
  if (command === 'constants') {
    process.stdout.write(`${JSON.stringify({
      constants: audit.CONSTANTS, messages: audit.MESSAGES,
      checkpoint_constants: audit.CHECKPOINT_CONSTANTS, checkpoint_messages: audit.CHECKPOINT_MESSAGES,
    }, null, 2)}\n`);
  } else if (command === 'decode' && rest.length === 1) {
    decodeCases(rest[0]);
  } else if (command === 'mutate-lines' && rest.length === 3) {
    mutateLines(rest[0], Number(rest[1]), rest[2]);
  } else if (command === 'mutate-log' && rest.length === 3) {
    mutateLog(rest[0], Number(rest[1]), rest[2]);
  } else if (command === 'verify-batch' && (rest.length === 2 || rest.length === 3)) {
    verifyBatch(rest[0], rest[1], rest[2]);
  } else {
    process.stderr.write('usage: cross_check.js constants | decode CASES | mutate-lines LOG COUNT SEED'
      + ' | mutate-log LOG COUNT SEED | verify-batch LOG EDITS [KEYS]\n');
    return 2;
  }
  return 0;
}

process.exitCode = main(process.argv.slice(2));
