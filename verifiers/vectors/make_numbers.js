#!/usr/bin/env node
// Writes numbers.json: IEEE doubles (as their 16 hex bits) and the text ECMAScript's
// JSON.stringify gives each, which is the number text of RFC 8785. Node's standard library only.
//
//   node verifiers/vectors/make_numbers.js [OUT]     (default: numbers.json beside this script)
//
// Deterministic: a fixed-seed generator, a fixed list of edge cases, one vector a line. Run again
// on the same node version, it writes the same bytes; on another version only the "source" line
// may differ (ECMA-262 fixes every digit: the shortest text that reads back as the same double).
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const FORMAT = 'jcs-number-vectors-v1';
const SEED = 0x746f6f6c2d646973n; // "tool-dis" in ASCII: any fixed value would do
const UNIFORM_PATTERNS = 1000; // any finite double: mostly huge or tiny exponents, 17 digits
const NEAR_ONE_PATTERNS = 400; // exponents within 2**+-70 of one: both notations and their borders
const SHORT_DECIMALS = 300; // few digits times a power of ten: where shortest round trip matters
const SAFE_INTEGERS = 100; // integers below 2**53 of every length
const MASK64 = (1n << 64n) - 1n;
const EXPONENT_BITS = 0x7ff0000000000000n; // all ones: NaN or an infinity, never JSON

// SplitMix64: small, well-mixed, and the same on every platform that has BigInt.
function generator(seed) {
  let state = seed;
  return function next() {
    state = (state + 0x9e3779b97f4a7c15n) & MASK64;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
    return z ^ (z >> 31n);
  };
}

function bitsOf(number) {
  const buffer = Buffer.alloc(8);
  buffer.writeDoubleBE(number);
  return buffer.readBigUInt64BE();
}

function numberOf(bits) {
  const buffer = Buffer.alloc(8);
  buffer.writeBigUInt64BE(bits);
  return buffer.readDoubleBE();
}

const nextUp = (x) => numberOf(bitsOf(x) + (x >= 0 ? 1n : -1n)); // for finite x != -0
const nextDown = (x) => numberOf(bitsOf(x) - (x > 0 ? 1n : -1n)); // for finite x != 0

function edgeCases() {
  const bits = [
    // RFC 8785, Appendix B, and its neighbours
    0x0000000000000000n, 0x8000000000000000n, 0x0000000000000001n, 0x8000000000000001n,
    0x7fefffffffffffffn, 0xffefffffffffffffn, 0x4340000000000000n, 0xc340000000000000n,
    0x4430000000000000n, 0x44b52d02c7e14af5n, 0x44b52d02c7e14af6n, 0x44b52d02c7e14af7n,
    0x444b1ae4d6e2ef4en, 0x444b1ae4d6e2ef4fn, 0x444b1ae4d6e2ef50n, 0x3eb0c6f7a0b5ed8cn,
    0x3eb0c6f7a0b5ed8dn, 0x41b3de4355555553n, 0x41b3de4355555554n, 0x41b3de4355555555n,
    0x41b3de4355555556n, 0x41b3de4355555557n, 0xbecbf647612f3696n, 0x43143ff3c1cb0959n,
    // subnormals: the smallest, a few, the largest; then the smallest normal
    0x0000000000000002n, 0x0000000000000003n, 0x00000000000003e8n, 0x0008000000000000n,
    0x000fffffffffffffn, 0x800fffffffffffffn, 0x0010000000000000n, 0x8010000000000000n,
  ].map(numberOf);
  const numbers = [
    1, -1, 0.1, 0.2, 0.3, 0.1 + 0.2, 1 / 3, 2 / 3, 0.5, 1.5, 4.5, 4.35, 1.005, 123e-20, 56.0,
    2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, -(2 ** 53 - 1), -(2 ** 53), 2 ** 63, 2 ** 64, 2 ** 31, 2 ** 32,
    1e21, nextDown(1e21), nextUp(1e21), -1e21, 1e20, 123456789012345680000,
    1e-7, nextDown(1e-7), nextUp(1e-7), 1e-6, nextDown(1e-6), -1e-7, 1.5e-7, 0.0000015,
    333333333.33333329, 1e30, 2e-3, 1e-27, 9007199254740993, 5e-324 * 3, Number.EPSILON,
    Number.MAX_VALUE, Number.MIN_VALUE, -Number.MAX_VALUE,
  ];
  for (let power = -30; power <= 30; power += 1) {
    const ten = Number(`1e${power}`);
    numbers.push(ten, nextDown(ten), nextUp(ten));
  }
  for (let power = -1074; power <= 1023; power += 61) numbers.push(2 ** power);
  return bits.concat(numbers);
}

function sampled() {
  const next = generator(SEED);
  const numbers = [];
  while (numbers.length < UNIFORM_PATTERNS) {
    const bits = next();
    if ((bits & EXPONENT_BITS) !== EXPONENT_BITS) numbers.push(numberOf(bits));
  }
  for (let i = 0; i < NEAR_ONE_PATTERNS; i += 1) {
    const bits = next();
    const exponent = 1023n - 70n + (bits >> 56n) % 141n; // biased exponent within 2**+-70
    const sign = bits & 0x8000000000000000n;
    numbers.push(numberOf(sign | (exponent << 52n) | (bits & 0x000fffffffffffffn)));
  }
  for (let i = 0; i < SHORT_DECIMALS; i += 1) {
    const bits = next();
    const digits = 1n + (bits % 999999n);
    const power = Number((bits >> 32n) % 61n) - 30;
    numbers.push(Number(`${(bits >> 63n) ? '-' : ''}${digits}e${power}`));
  }
  for (let i = 0; i < SAFE_INTEGERS; i += 1) {
    const bits = next();
    const length = 1n + BigInt(i % 16);
    numbers.push(Number((bits % (10n ** length)) * ((bits >> 62n) & 1n ? -1n : 1n)));
  }
  return numbers;
}

function vectors() {
  const seen = new Set();
  const rows = [];
  for (const number of edgeCases().concat(sampled())) {
    const hex = bitsOf(number).toString(16).padStart(16, '0');
    if (seen.has(hex)) continue;
    seen.add(hex);
    rows.push(JSON.stringify([hex, JSON.stringify(number)]));
  }
  return rows;
}

function main() {
  const out = process.argv[2] || path.join(__dirname, 'numbers.json');
  const text = `{"format":${JSON.stringify(FORMAT)},\n`
    + `"source":${JSON.stringify(`node ${process.version} JSON.stringify`)},\n`
    + `"vectors":[\n${vectors().join(',\n')}\n]}\n`;
  fs.writeFileSync(out, text);
}

main();
