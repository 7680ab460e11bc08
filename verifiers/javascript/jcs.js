// RFC 8785 (JSON Canonicalization Scheme) and the strict decoder of tool_dispatcher.py, in
// JavaScript with no library at all: a second implementation that shares no code with the Python
// module, so that a bug in one shows up as a disagreement with the other.
//
// It runs unchanged in node (require) and in a browser (a module script, as
// viewer/audit-viewer.html inlines it, where it is globalThis.ToolDispatcherJcs): bytes are
// Uint8Arrays (a node Buffer is one), text goes through TextDecoder and TextEncoder, and nothing
// here hashes (audit_core.js asks its caller for digests).
//
// Sections: 1. limits and error codes; 2. the strict decoder (byte cap, UTF-8, nesting scan,
// a tokenizer that refuses what the Python decoder refuses, in the same order, then the portable
// domain); 3. canonical text.
//
// The decoder is written out rather than left to JSON.parse because JSON.parse cannot see what
// the Python decoder refuses: a repeated key (it keeps the last), a lone surrogate escape, an
// integer beyond 2**53 - 1 (it rounds), 1e400 (it answers Infinity); and it cannot tell 1.0 from 1,
// which the log's checks do (an index is an integer, never 1.0).
'use strict';

// ============================================================================================
// 1. Limits and error codes
// ============================================================================================

const MAX_SAFE_INTEGER = 2 ** 53 - 1; // the integers every JSON peer reads exactly
const MAX_INTEGER_DIGITS = String(MAX_SAFE_INTEGER).length; // a longer digit run is refused unread
const MAX_NESTING_DEPTH = 32; // containers deep, as the Python decoder's default
const MAX_DOCUMENT_BYTES = 65_536; // the Python decoder's default byte cap (a fixture's)

// The strict decoder's codes, as the Python module names them (its "json" scope).
const JSON_CODES = Object.freeze(new Set([
  'JSON_TOO_LARGE', 'JSON_NOT_UTF8', 'JSON_TOO_DEEP', 'JSON_INVALID', 'JSON_DUPLICATE_KEY',
  'JSON_NON_FINITE', 'JSON_NOT_PORTABLE',
]));

class JsonError extends Error {
  constructor(code) {
    if (!JSON_CODES.has(code)) throw new TypeError('unknown JSON error code');
    super(code);
    this.code = code;
  }
}

// A number written with a fraction or an exponent: Python reads it as a float, never as an int,
// even when its value is whole (1.0). Its canonical text is the double's, like any number's.
class Double {
  constructor(value) {
    this.value = value;
    Object.freeze(this);
  }
}

// ============================================================================================
// 2. The strict decoder
// ============================================================================================
// Stages in the Python decoder's order, so that a text with two faults gets the same code from
// both: byte cap, UTF-8, the nesting scan over the raw bytes, the tokenizer (whose refusals fall
// in text order: a number when it is read, a repeated key when its object closes, a syntax fault
// where it is met), and last the lone-surrogate check over the whole value.

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }); // a BOM stays, and is refused
const WHITESPACE = new Set([' ', '\t', '\n', '\r']); // JSON's four, and no other
const SIMPLE_ESCAPES = Object.freeze({ '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' });
const CONSTANTS = Object.freeze([['null', null], ['true', true], ['false', false]]);
const NON_FINITE = Object.freeze(['NaN', 'Infinity', '-Infinity']);
const HEX4 = /^[0-9a-fA-F]{4}$/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function isDigit(c) {
  return c >= '0' && c <= '9';
}

// The nesting scan: what lies outside strings, as brackets, never deeper than maxDepth. Escaped
// backslashes and quotes go first (left to right), then everything but quotes and brackets, then
// the string bodies between quote pairs (empty pairs first, left to right). The same scan as the
// Python module's, on the same bytes, so a malformed text gets the same answer from both. Byte by
// byte rather than with regular expressions, whose one match a bracket or comma costs a hundred
// times more on a line of 20,000 empty objects.
function exceedsNesting(data, maxDepth) {
  const outline = new Uint8Array(data.length); // the quotes and brackets left after escaped pairs
  let size = 0;
  for (let at = 0; at < data.length; at += 1) {
    const byte = data[at];
    if (byte === BACKSLASH && (data[at + 1] === BACKSLASH || data[at + 1] === QUOTE)) {
      at += 1; // an escaped backslash or quote: neither is kept
    } else if (byte === QUOTE || OUTLINE_BRACKET[byte] !== 0) {
      outline[size] = byte;
      size += 1;
    }
  }
  let depth = 0;
  let inside = false; // between a quote and the next one
  for (let at = 0; at < size; at += 1) {
    const byte = outline[at];
    if (byte === QUOTE) {
      if (outline[at + 1] === QUOTE && at + 1 < size) at += 1; // an empty pair is dropped whole
      else inside = !inside;
    } else if (!inside) {
      depth += OUTLINE_BRACKET[byte];
      if (depth > maxDepth) return true;
    }
  }
  return false;
}

const BACKSLASH = 0x5c;
const QUOTE = 0x22;
const OUTLINE_BRACKET = new Int8Array(256); // +1 an opener, -1 a closer, 0 anything else
OUTLINE_BRACKET[0x5b] = 1; // [
OUTLINE_BRACKET[0x7b] = 1; // {
OUTLINE_BRACKET[0x5d] = -1; // ]
OUTLINE_BRACKET[0x7d] = -1; // }

// One character a byte, as node's Buffer#toString('latin1') (TextDecoder's "latin1" is
// windows-1252, which maps some bytes elsewhere).
const LATIN1_CHUNK = 8192; // arguments a call to String.fromCharCode takes at once
function latin1Text(data) {
  let text = '';
  for (let at = 0; at < data.length; at += LATIN1_CHUNK) {
    text += String.fromCharCode.apply(null, data.subarray(at, at + LATIN1_CHUNK));
  }
  return text;
}

class Tokenizer {
  constructor(text) {
    this.text = text;
    this.at = 0;
    this.loneSurrogate = false; // refused after the whole value, as the Python decoder does
  }

  fail() {
    throw new JsonError('JSON_INVALID');
  }

  skipWhitespace() {
    while (this.at < this.text.length && WHITESPACE.has(this.text[this.at])) this.at += 1;
  }

  // The whole document: one value, whitespace around it, nothing else.
  document() {
    if (this.text.startsWith('\ufeff')) this.fail();
    this.skipWhitespace();
    const value = this.values();
    this.skipWhitespace();
    if (this.at !== this.text.length) this.fail();
    if (this.loneSurrogate) throw new JsonError('JSON_NOT_PORTABLE');
    return value;
  }

  // Iterative, with an explicit stack: a hostile text meets no recursion here either.
  values() {
    const stack = [];
    let value = this.scalarOrOpen(stack);
    for (;;) {
      if (stack.length === 0) return value;
      const frame = stack[stack.length - 1];
      if (value !== OPENED) frame.add(value);
      value = this.continueFrame(frame, stack);
    }
  }

  // After a value inside a container (or right after its opener): the next value, or the
  // container itself once it closes.
  continueFrame(frame, stack) {
    const t = this.text;
    this.skipWhitespace();
    if (frame.fresh) {
      frame.fresh = false;
      if (t[this.at] === frame.closer) return this.close(frame, stack);
    } else {
      if (t[this.at] === frame.closer) return this.close(frame, stack);
      if (t[this.at] !== ',') this.fail();
      this.at += 1;
      this.skipWhitespace();
    }
    if (frame.object) {
      if (t[this.at] !== '"') this.fail();
      this.at += 1;
      frame.key = this.string();
      this.skipWhitespace();
      if (t[this.at] !== ':') this.fail();
      this.at += 1;
      this.skipWhitespace();
    }
    return this.scalarOrOpen(stack);
  }

  close(frame, stack) {
    this.at += 1;
    stack.pop();
    // Python's object_pairs_hook sees the pairs when the object closes: a repeated key is
    // refused there, after every value inside it was read (and perhaps refused first).
    if (frame.object && frame.repeated) throw new JsonError('JSON_DUPLICATE_KEY');
    return frame.value;
  }

  scalarOrOpen(stack) {
    const t = this.text;
    const c = t[this.at];
    if (c === '{' || c === '[') {
      this.at += 1;
      stack.push(c === '{' ? new ObjectFrame() : new ArrayFrame());
      return OPENED;
    }
    if (c === '"') {
      this.at += 1;
      return this.string();
    }
    for (const [word, constant] of CONSTANTS) {
      if (t.startsWith(word, this.at)) {
        this.at += word.length;
        return constant;
      }
    }
    for (const word of NON_FINITE) {
      if (t.startsWith(word, this.at)) throw new JsonError('JSON_NON_FINITE');
    }
    return this.number();
  }

  // A number as Python's scanner reads it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, where
  // a "." or an "e" not followed by digits is left unread (the next token then fails).
  number() {
    const t = this.text;
    const start = this.at;
    let at = start;
    if (t[at] === '-') at += 1;
    if (t[at] === '0') {
      at += 1;
    } else if (t[at] >= '1' && t[at] <= '9') {
      while (isDigit(t[at])) at += 1;
    } else {
      this.fail();
    }
    let fractional = false;
    if (t[at] === '.' && isDigit(t[at + 1])) {
      fractional = true;
      at += 2;
      while (isDigit(t[at])) at += 1;
    }
    if (t[at] === 'e' || t[at] === 'E') {
      let end = at + 1;
      if (t[end] === '-' || t[end] === '+') end += 1;
      const digits = end;
      while (isDigit(t[end])) end += 1;
      if (end > digits) {
        fractional = true;
        at = end;
      }
    }
    this.at = at;
    const written = t.slice(start, at);
    return fractional ? finiteDouble(written) : safeInteger(written);
  }

  // A string body, after its opening quote; Python's strict scanner: no raw control character,
  // JSON's escapes only, \u with four hex digits, a surrogate pair joined when both are escaped.
  string() {
    const t = this.text;
    let out = '';
    for (;;) {
      let end = this.at;
      while (end < t.length) {
        const c = t.charCodeAt(end);
        if (c === 0x22 || c === 0x5c) break;
        if (c <= 0x1f) this.fail();
        end += 1;
      }
      if (end >= t.length) this.fail();
      out += t.slice(this.at, end);
      this.at = end + 1;
      if (t[end] === '"') break;
      const kind = t[this.at];
      if (kind === 'u') {
        const hex = t.slice(this.at + 1, this.at + 5);
        if (!HEX4.test(hex)) this.fail();
        out += String.fromCharCode(parseInt(hex, 16));
        this.at += 5;
      } else if (kind !== undefined && Object.hasOwn(SIMPLE_ESCAPES, kind)) {
        out += SIMPLE_ESCAPES[kind];
        this.at += 1;
      } else {
        this.fail();
      }
    }
    if (LONE_SURROGATE.test(out)) this.loneSurrogate = true;
    return out;
  }
}

const OPENED = Symbol('opened'); // a container was opened: its frame is on the stack

class ObjectFrame {
  constructor() {
    this.object = true;
    this.closer = '}';
    this.fresh = true;
    this.key = null;
    this.repeated = false;
    this.value = Object.create(null); // no prototype: "__proto__" is a key like any other
  }

  add(value) {
    if (Object.hasOwn(this.value, this.key)) this.repeated = true;
    this.value[this.key] = value;
  }
}

class ArrayFrame {
  constructor() {
    this.object = false;
    this.closer = ']';
    this.fresh = true;
    this.value = [];
  }

  add(value) {
    this.value.push(value);
  }
}

// Whole doubles from 2**53 up to 1e21 are written as plain digit runs (1e20 as
// 100000000000000000000), which read back as integers no double holds: outside the portable domain.
const PORTABLE_FLOAT_GAP = [2 ** 53, 1e21];

function finiteDouble(written) {
  const value = Number(written); // correctly rounded, as Python's float()
  if (!Number.isFinite(value)) throw new JsonError('JSON_NON_FINITE');
  const size = Math.abs(value);
  if (size >= PORTABLE_FLOAT_GAP[0] && size < PORTABLE_FLOAT_GAP[1]) throw new JsonError('JSON_NOT_PORTABLE');
  return new Double(value);
}

function safeInteger(written) {
  // The length first, as the Python module does: a 60,000-digit integer is never converted.
  if (written.replace(/^-/, '').length > MAX_INTEGER_DIGITS) throw new JsonError('JSON_NOT_PORTABLE');
  const value = BigInt(written);
  if (value > BigInt(MAX_SAFE_INTEGER) || value < -BigInt(MAX_SAFE_INTEGER)) throw new JsonError('JSON_NOT_PORTABLE');
  return Number(value); // -0 is read as the integer 0
}

// Decode untrusted JSON bytes as the Python module's decode_strict_json does under its portable
// policy: the value, or a JsonError with the code the Python decoder gives the same bytes.
function decodeStrictJson(data, { maxBytes = MAX_DOCUMENT_BYTES, maxDepth = MAX_NESTING_DEPTH } = {}) {
  if (!(data instanceof Uint8Array)) throw new JsonError('JSON_INVALID');
  if (data.length > maxBytes) throw new JsonError('JSON_TOO_LARGE');
  let text;
  try {
    text = UTF8.decode(data);
  } catch {
    throw new JsonError('JSON_NOT_UTF8');
  }
  if (exceedsNesting(data, maxDepth)) throw new JsonError('JSON_TOO_DEEP');
  return new Tokenizer(text).document();
}

// ============================================================================================
// 3. Canonical text
// ============================================================================================
// RFC 8785: no whitespace; members sorted by the UTF-16 code units of their keys (JavaScript's
// own string order); strings as JSON.stringify writes them; numbers as Number::toString writes
// them, which is what String() does, -0 included ("0"). Input is what decodeStrictJson or
// JSON.parse returns. A lone surrogate or a non-finite number has no canonical text: TypeError.

function numberText(value) {
  if (!Number.isFinite(value)) throw new TypeError('not a finite number');
  return String(value);
}

function stringText(text) {
  if (LONE_SURROGATE.test(text)) throw new TypeError('a lone surrogate has no canonical text');
  return JSON.stringify(text);
}

function canonicalText(value) {
  if (value === null) return 'null';
  if (value === true) return 'true';
  if (value === false) return 'false';
  if (typeof value === 'number') return numberText(value);
  if (typeof value === 'string') return stringText(value);
  if (value instanceof Double) return numberText(value.value);
  if (Array.isArray(value)) return `[${value.map(canonicalText).join(',')}]`;
  if (typeof value === 'object' && isPlainObject(value)) {
    const keys = Object.keys(value).sort(); // the default order is by UTF-16 code units
    return `{${keys.map((key) => `${stringText(key)}:${canonicalText(value[key])}`).join(',')}}`;
  }
  throw new TypeError('not a JSON value');
}

function isPlainObject(value) {
  const prototype = Object.getPrototypeOf(value);
  return prototype === null || prototype === Object.prototype;
}

const UTF8_ENCODER = new TextEncoder();

function canonicalBytes(value) {
  return UTF8_ENCODER.encode(canonicalText(value));
}

const API = Object.freeze({
  MAX_SAFE_INTEGER, MAX_NESTING_DEPTH, MAX_DOCUMENT_BYTES, JSON_CODES, JsonError, Double,
  decodeStrictJson, exceedsNesting, latin1Text, numberText, canonicalText, canonicalBytes,
});
if (typeof module === 'object' && module !== null && typeof module.exports === 'object') {
  module.exports = API;
} else {
  globalThis.ToolDispatcherJcs = API;
}
