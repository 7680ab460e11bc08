// The audit viewer's page logic. It reads the files a person drops or picks, verifies them with
// audit_core.js (the rules of `node verifiers/javascript/verify_audit.js`, inlined before this
// script, byte for byte) over Web Crypto, and shows the run as a timeline.
//
// What it never does: send anything anywhere (the page's Content-Security-Policy allows no
// connection, and nothing here asks for one); put text from a file into the page as markup (every
// value goes in through createTextNode, never innerHTML); print a secret (a seal key is read into
// memory, used, and never shown); read more of a file than the verifier would (the core's limits).
//
// Sections: 1. limits of what is shown; 2. Web Crypto's answers to the rules; 3. reading files;
// 4. the verdict; 5. the timeline; 6. the page.
'use strict';

(() => {
  const jcs = globalThis.ToolDispatcherJcs;
  const core = globalThis.ToolDispatcherAuditCore;
  const { CONSTANTS, CHECKPOINT_CONSTANTS, CatalogError } = core;

  // ==========================================================================================
  // 1. Limits of what is shown
  // ==========================================================================================
  // A log may hold a million entries of 64 KiB each: the verification reads them all, the page
  // shows a bounded part, and says what it left out.

  const MAX_ROWS = 2_000; // timeline rows a page builds
  const HEAD_ROWS = 1_000; // with more entries than MAX_ROWS: the first ones, then those around the break
  const MAX_VALUE_CHARS = 4_000; // one value's text in a row; the rest is counted, not shown
  const MAX_RAW_CHARS = 300; // of a line that is no entry at all

  // ==========================================================================================
  // 2. Web Crypto's answers to the rules
  // ==========================================================================================

  // This browser cannot check Ed25519 signatures: the checkpoints are shown unverified.
  class Unsupported extends Error {}

  const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));
  const hexText = (buffer) => Array.from(new Uint8Array(buffer), (byte) => HEX[byte]).join('');
  const hmacKeys = new WeakMap(); // a seal key's bytes -> its imported CryptoKey

  function macBytes(hex) {
    const out = new Uint8Array(hex.length / 2);
    for (let i = 0; i < out.length; i += 1) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
    return out;
  }

  async function answer(request) {
    const subtle = globalThis.crypto.subtle;
    switch (request.op) {
      case 'sha256':
        return hexText(await subtle.digest('SHA-256', request.data));
      case 'hmac-sha256': {
        let key = hmacKeys.get(request.key);
        if (key === undefined) {
          key = await subtle.importKey('raw', request.key, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
          hmacKeys.set(request.key, key);
        }
        return subtle.verify('HMAC', key, macBytes(request.mac), request.data); // constant-time
      }
      case 'ed25519-key':
        try {
          return await subtle.importKey('spki', request.spki, { name: 'Ed25519' }, false, ['verify']);
        } catch (error) {
          if (error && error.name === 'NotSupportedError') throw new Unsupported();
          return null;
        }
      case 'ed25519-verify':
        return subtle.verify({ name: 'Ed25519' }, request.key, request.signature, request.data);
      default:
        throw new TypeError('unknown request');
    }
  }

  // ==========================================================================================
  // 3. Reading files
  // ==========================================================================================
  // As the command line reads a path: at most one byte more than the limit, any failure null.
  // A log or a checkpoint file over its limit is refused by its size, unread.

  async function readBounded(file, maxBytes) {
    if (file === null) return null;
    try {
      // A slice of a file that is gone reads as empty; the whole file is read, and fails, instead.
      const wanted = Math.min(file.size, maxBytes + 1);
      const data = new Uint8Array(await (file.size > maxBytes ? file.slice(0, wanted) : file).arrayBuffer());
      return data.length === wanted ? data : null;
    } catch {
      return null; // gone, a folder, not readable
    }
  }

  async function readAuditLog(file) {
    const data = file === null || file.size > CONSTANTS.MAX_AUDIT_LOG_BYTES ? null
      : await readBounded(file, CONSTANTS.MAX_AUDIT_LOG_BYTES);
    if (data === null) throw new CatalogError('AUDIT_LOG_UNREADABLE');
    return data;
  }

  // ==========================================================================================
  // 4. The verdict
  // ==========================================================================================
  // In the command line's order: the key file, then the log, then the checkpoints. The answer is
  // the command line's ({status, output}), with the log's bytes when they were read and a note
  // when the checkpoints could not be checked here.

  async function verdictFor(files) {
    if (files.keys !== null && files.publicKey !== null) {
      throw new CatalogError('CLI_USAGE'); // --seal-key with --public-key: the command line refuses it too
    }
    if (files.publicKey !== null) return signedVerdict(files);
    let secrets = null;
    if (files.keys !== null) {
      const keys = await readBounded(files.keys, CONSTANTS.MAX_SEAL_KEYS_BYTES);
      if (keys === null) throw new CatalogError('SEAL_KEYS_UNREADABLE');
      secrets = core.sealKeysFromBytes(keys);
    }
    const data = await readAuditLog(files.log);
    return { ...(await core.runAsync(core.verifyAnswer(data, secrets), answer)), data, note: null };
  }

  async function signedVerdict(files) {
    const keyBytes = await readBounded(files.publicKey, CHECKPOINT_CONSTANTS.MAX_KEY_FILE_BYTES);
    if (keyBytes === null) throw new CatalogError('PUBLIC_KEY_UNREADABLE');
    let publicKey;
    try {
      publicKey = await core.runAsync(core.publicKeyFromBytes(keyBytes), answer);
    } catch (error) {
      if (!(error instanceof Unsupported)) throw error;
      const data = await readAuditLog(files.log);
      return { ...(await core.runAsync(core.verifyAnswer(data, null), answer)), data,
        note: 'This browser cannot check Ed25519 signatures (Web Crypto has no Ed25519 here): the '
          + 'chain was verified without keys, and the checkpoints are not verified.' };
    }
    const data = await readAuditLog(files.log);
    const checkpoints = files.checkpoints === null || files.checkpoints.size > CHECKPOINT_CONSTANTS.MAX_CHECKPOINTS_BYTES
      ? null : await readBounded(files.checkpoints, CHECKPOINT_CONSTANTS.MAX_CHECKPOINTS_BYTES);
    return { ...(await core.runAsync(core.signedVerifyAnswer(data, publicKey, checkpoints), answer)), data, note: null };
  }

  // The command line that prints the same answer, with the file names a person picked (the
  // Python CLI and node's verifier print the same bytes; checkpoints are the signature layer's).
  function commandLine(files) {
    const name = (file, stand) => (file === null ? stand : file.name);
    if (files.publicKey !== null) {
      return `python -B signatures/audit_signatures.py --verify-audit ${name(files.log, 'LOG')}`
        + ` --public-key ${name(files.publicKey, 'PUB.pem')}  (checkpoints: LOG.checkpoints)`;
    }
    return `python -B tool_dispatcher.py --verify-audit ${name(files.log, 'LOG')}`
      + (files.keys === null ? '' : ` --seal-key ${name(files.keys, 'KEYS')}`);
  }

  // ==========================================================================================
  // 5. The timeline
  // ==========================================================================================

  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === 'string' ? document.createTextNode(child) : child);
    }
    return node;
  }

  // A member at a path, or undefined wherever the path leaves objects.
  function field(value, ...path) {
    let at = value;
    for (const key of path) {
      if (!core.isObject(at) || !Object.hasOwn(at, key)) return undefined;
      at = at[key];
    }
    return at;
  }

  function capped(text) {
    return text.length <= MAX_VALUE_CHARS ? text
      : `${text.slice(0, MAX_VALUE_CHARS)} ... (${text.length - MAX_VALUE_CHARS} more characters not shown)`;
  }

  // A value as one line of canonical JSON; a string as itself.
  function shown(value) {
    if (value === undefined) return '(absent)';
    if (typeof value === 'string') return capped(value);
    try {
      return capped(jcs.canonicalText(value));
    } catch {
      return '(no JSON text)';
    }
  }

  // A value as indented JSON, keys in the log's (canonical) order. Depth is the decoder's, at most 32.
  function pretty(value, indent = '') {
    if (value === null || typeof value !== 'object' || value instanceof jcs.Double) return jcs.canonicalText(value);
    const inner = `${indent}  `;
    if (Array.isArray(value)) {
      if (value.length === 0) return '[]';
      return `[\n${value.map((item) => inner + pretty(item, inner)).join(',\n')}\n${indent}]`;
    }
    const keys = Object.keys(value).sort();
    if (keys.length === 0) return '{}';
    return `{\n${keys.map((key) => `${inner}${jcs.canonicalText(key)}: ${pretty(value[key], inner)}`).join(',\n')}\n${indent}}`;
  }

  function prettyShown(value) {
    try {
      return capped(pretty(value));
    } catch {
      return '(no JSON text)';
    }
  }

  function when(seconds) {
    if (!Number.isSafeInteger(seconds) || seconds < 0 || seconds > 4_102_444_800) return shown(seconds);
    return `${new Date(seconds * 1000).toISOString().replace('T', ' ').replace('.000Z', ' UTC')} (${seconds})`;
  }

  function badge(kind, value) {
    const text = typeof value === 'string' ? value : shown(value);
    const node = el('span', `badge ${kind}`, el('span', 'badge-name', kind), ' ', el('span', 'badge-value', text));
    node.dataset.kind = kind;
    node.dataset.value = text;
    return node;
  }

  function row(label, ...value) {
    return el('div', 'row', el('span', 'label', label), el('span', 'value', ...value));
  }

  function approvalText(approval) {
    if (approval === null) return 'none';
    if (approval === undefined) return '(absent)';
    const approver = field(approval, 'approver');
    const expires = field(approval, 'expires_at');
    return `${shown(approver)}, valid until ${when(expires)}`;
  }

  function effectsText(execution) {
    const effects = field(execution, 'effects');
    const invoked = field(execution, 'handler_invoked');
    const state = field(execution, 'operation_state');
    const ran = invoked === true ? 'the handler ran' : invoked === false ? 'the handler did not run' : `handler ${shown(invoked)}`;
    return `${shown(effects)} (${ran}; operation ${shown(state)})`;
  }

  function shownToModel(result) {
    const status = field(result, 'status');
    const error = field(result, 'error');
    const parts = [];
    if (error !== undefined) {
      parts.push(el('code', 'error-code', shown(field(error, 'code'))), ' ', shown(field(error, 'message')));
    } else {
      parts.push(el('code', 'data', shown(field(result, 'data'))));
    }
    const trust = field(result, 'trust');
    const producer = field(result, 'source', 'producer');
    const tail = status === 'ok' ? ` (${shown(trust)}, from ${shown(producer)})` : ` (${shown(trust)})`;
    return [...parts, tail];
  }

  // The tool a package answers; a name no contract has is recorded without a contract.
  function toolName(pkg) {
    const contract = field(pkg, 'protected_audit', 'tool_contract');
    if (contract === null) return 'no tool (a name no contract has)';
    return shown(field(contract, 'tool'));
  }

  function entryRow(entry, position) {
    const pkg = field(entry, 'package');
    const result = field(pkg, 'model_result');
    const audit = field(pkg, 'protected_audit');
    const status = field(result, 'status');
    const context = field(audit, 'provider_context');
    const purpose = field(context, 'purpose');
    const item = el('li', `entry status-${typeof status === 'string' ? status.replace(/[^a-z_]/g, '') : 'other'}`);
    item.dataset.position = String(position);
    const title = el('div', 'entry-title',
      el('span', 'position', `entry ${position}`),
      field(entry, 'index') !== position ? el('span', 'claims', ` (claims index ${shown(field(entry, 'index'))})`) : null,
      ' ', el('span', 'tool', toolName(pkg)),
      ' ', el('span', 'purpose', purpose === 'query_status' ? 'status query' : shown(purpose)),
      ' ', el('span', 'provider', `${shown(field(context, 'provider'))} ${shown(field(context, 'api_family'))}, call ${shown(field(context, 'call_id'))}`));
    const badges = el('div', 'badges', badge('status', status), badge('outcome', field(result, 'outcome')),
      badge('delivery', field(result, 'delivery')), badge('recovery', field(result, 'recovery')));
    const seal = field(entry, 'seal', 'key_id');
    const details = wholeEntry(entry);
    item.append(title, badges,
      row('approval', approvalText(field(audit, 'approval'))),
      row('effects', effectsText(field(pkg, 'execution'))),
      row('arguments', el('code', null, shown(field(audit, 'arguments')))),
      row('model was shown', ...shownToModel(result)),
      row('seal', seal === null ? 'unsealed' : `key ${shown(seal)}`),
      details);
    return item;
  }

  // The whole entry as indented JSON, written out when a person first opens it.
  function wholeEntry(entry) {
    const text = el('pre', null);
    const details = el('details', 'whole', el('summary', null, 'the whole entry, as written'), text);
    details.addEventListener('toggle', () => {
      if (details.open && !text.firstChild) text.append(prettyShown(entry));
    });
    return details;
  }

  function closingRow(entry, position) {
    const item = el('li', 'entry closing', el('div', 'entry-title', el('span', 'position', `entry ${position}`),
      ' ', el('span', 'tool', 'closing entry'), ' ', el('span', 'purpose', 'the writer closed the log here')));
    item.dataset.position = String(position);
    const seal = field(entry, 'seal', 'key_id');
    item.append(row('seal', seal === null ? 'unsealed' : `key ${shown(seal)}`));
    return item;
  }

  function rawRow(line, position, why) {
    const text = new TextDecoder('utf-8').decode(line.subarray(0, MAX_RAW_CHARS * 4));
    const item = el('li', 'entry raw', el('div', 'entry-title', el('span', 'position', `entry ${position}`),
      ' ', el('span', 'tool', why)),
    el('pre', 'raw-text', text.length > MAX_RAW_CHARS ? `${text.slice(0, MAX_RAW_CHARS)} ...` : text));
    item.dataset.position = String(position);
    return item;
  }

  // Each line of the log and its value, decoded once for the rows and the counts (the value is
  // undefined where the line is no JSON the verifier reads). The last line may lack its newline.
  function decodedLines(data) {
    const lines = core.splitLines(data);
    if (lines[lines.length - 1].length === 0) lines.pop();
    return lines.map((line) => {
      try {
        return { line, entry: jcs.decodeStrictJson(line, { maxBytes: CONSTANTS.MAX_AUDIT_LINE_BYTES }) };
      } catch {
        return { line, entry: undefined };
      }
    });
  }

  function lineRow({ line, entry }, position) {
    if (entry === undefined) return rawRow(line, position, 'not a JSON line the verifier reads');
    if (!core.isObject(entry)) return rawRow(line, position, 'not an entry');
    if (Object.hasOwn(entry, 'closed')) return closingRow(entry, position);
    return entryRow(entry, position);
  }

  // Which positions get a row: all of them, or with more than MAX_ROWS the first HEAD_ROWS and
  // those around the break (else the last ones).
  function shownRanges(total, mark) {
    if (total <= MAX_ROWS) return [[0, total]];
    const half = (MAX_ROWS - HEAD_ROWS) / 2;
    const centre = mark === null || mark >= total ? total - half : mark;
    const start = Math.max(HEAD_ROWS, Math.min(centre - half, total - 2 * half));
    return [[0, HEAD_ROWS], [start, Math.min(total, start + 2 * half)]];
  }

  function timeline(lines, failure) {
    const mark = failure === null ? null : failure.index;
    const list = el('ol', 'timeline');
    list.id = 'timeline';
    let shownUpTo = 0;
    for (const [start, end] of shownRanges(lines.length, mark)) {
      if (start > shownUpTo) list.append(el('li', 'gap', `${start - shownUpTo} entries not shown`));
      for (let position = start; position < end; position += 1) {
        const item = lineRow(lines[position], position);
        if (position === mark) markBroken(item, failure);
        list.append(item);
      }
      shownUpTo = end;
    }
    if (shownUpTo < lines.length) list.append(el('li', 'gap', `${lines.length - shownUpTo} entries not shown`));
    if (mark !== null && mark >= lines.length) {
      const end = el('li', 'entry missing', el('div', 'entry-title', el('span', 'position', `entry ${mark}`),
        ' ', el('span', 'tool', 'no entry: the log ends here')));
      end.dataset.position = String(mark);
      markBroken(end, failure);
      list.append(end);
    }
    return list;
  }

  function markBroken(item, failure) {
    item.classList.add('broken');
    item.dataset.code = failure.code;
    const note = el('div', 'break', el('strong', null, 'The verification stops here: '), el('code', 'code', failure.code),
      ` ${failure.message}`);
    item.insertBefore(note, item.firstChild.nextSibling);
  }

  // Counts over the entries that decode: tools, answers, deliveries, effects.
  function summaryOf(lines) {
    const tally = { calls: 0, effects: 0, tools: new Map(), status: new Map(), delivery: new Map() };
    const add = (map, key) => map.set(key, (map.get(key) || 0) + 1);
    for (const { entry } of lines) {
      const pkg = field(entry, 'package');
      if (pkg === undefined) continue;
      tally.calls += 1;
      const effects = field(pkg, 'execution', 'effects');
      if (Number.isSafeInteger(effects)) tally.effects += effects;
      add(tally.tools, toolName(pkg));
      add(tally.status, shown(field(pkg, 'model_result', 'status')));
      add(tally.delivery, shown(field(pkg, 'model_result', 'delivery')));
    }
    const listed = (map) => [...map].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([key, count]) => `${key} ${count}`).join(', ');
    return el('dl', 'summary',
      el('dt', null, 'tool calls'), el('dd', null, `${tally.calls} (effects counted in their packages: ${tally.effects})`),
      el('dt', null, 'tools'), el('dd', null, listed(tally.tools) || 'none'),
      el('dt', null, 'answers'), el('dd', null, listed(tally.status) || 'none'),
      el('dt', null, 'deliveries'), el('dd', null, listed(tally.delivery) || 'none'));
  }

  // ==========================================================================================
  // 6. The page
  // ==========================================================================================

  const ROLES = Object.freeze(['log', 'keys', 'publicKey', 'checkpoints']);
  const chosen = { log: null, keys: null, publicKey: null, checkpoints: null };
  const root = document.documentElement;
  const byId = (id) => document.getElementById(id);
  let generation = 0; // a newer choice of files makes an older run's answer moot

  function inputOf(role) {
    return document.querySelector(`input[data-role="${role}"]`);
  }

  function showVerdict(result, files) {
    const box = byId('verdict');
    const output = result.output;
    const title = byId('verdict-title');
    const detail = byId('verdict-detail');
    box.className = `verdict ${output.passed ? 'passed' : 'refused'}`;
    if (output.passed) {
      title.textContent = `Verified: ${output.entries} entries${output.sealed ? ', every one sealed with a key given' : ''}`
        + (output.checkpoints !== undefined ? `, ${output.checkpoints} signed checkpoints` : '');
      detail.textContent = `Chain head ${output.head_sha256}. Every line, chain link${output.sealed ? ', seal' : ''}`
        + ` and package digest holds${output.checkpoints !== undefined ? ', and every checkpoint is signed by the key given' : ''}.`
        + (output.sealed || output.checkpoints !== undefined ? '' : ' Without a key this shows consistency only:'
          + ' whoever can write the log can recompute every digest.');
    } else if (output.failure !== undefined) {
      const where = output.failure.at.startsWith('checkpoints[') ? `checkpoint ${output.failure.index}` : `entry ${output.failure.index}`;
      title.textContent = `Refused at ${where}: ${output.failure.code}`;
      detail.textContent = `${output.failure.message} The verifier stops at the first fault, so no entry is vouched for`
        + ' until the whole log passes.';
    } else {
      title.textContent = `Not verified: ${output.error.code}`;
      detail.textContent = output.error.code === 'CLI_USAGE'
        ? 'Seal keys and a public key cannot be used together (the command line refuses --seal-key with --public-key too): clear one.'
        : output.error.message;
    }
    byId('note').textContent = result.note || '';
    byId('cli-command').textContent = commandLine(files);
    byId('cli-output').textContent = core.answerText(output);
    byId('cli-status').textContent = `exit status ${result.status}`;
    root.dataset.verdict = output.passed ? 'passed' : (output.failure || output.error).code;
    root.dataset.status = String(result.status);
    if (result.note === null) delete root.dataset.checkpoints;
    else root.dataset.checkpoints = 'unverified';
  }

  function showRun(result, files) {
    showVerdict(result, files);
    const place = byId('run');
    place.replaceChildren();
    byId('show-break').hidden = true;
    if (result.data === undefined || result.status === 2) return;
    const failure = result.output.failure !== undefined && result.output.failure.at.startsWith('entries[')
      ? result.output.failure : null;
    const lines = decodedLines(result.data);
    place.append(summaryOf(lines), timeline(lines, failure));
    byId('show-break').hidden = failure === null;
  }

  function idle(message) {
    byId('verdict').className = 'verdict idle';
    byId('verdict-title').textContent = message;
    byId('verdict-detail').textContent = '';
    byId('note').textContent = '';
    byId('cli-command').textContent = '';
    byId('cli-output').textContent = '';
    byId('cli-status').textContent = '';
    byId('run').replaceChildren();
    byId('show-break').hidden = true;
    delete root.dataset.verdict;
    delete root.dataset.status;
    delete root.dataset.checkpoints;
  }

  async function refresh() {
    generation += 1;
    const mine = generation;
    const files = { ...chosen };
    for (const role of ROLES) byId(`${role}-name`).textContent = files[role] === null ? 'none' : files[role].name;
    if (files.log === null) {
      idle('Drop an audit log on this page, or pick one above.');
      finish(mine);
      return;
    }
    root.dataset.state = 'verifying';
    byId('verdict-title').textContent = 'Verifying...';
    let result;
    try {
      result = await verdictFor(files);
    } catch (error) {
      result = { ...core.errorAnswer(error), note: null };
    }
    if (mine !== generation) return;
    try {
      showRun(result, files);
    } catch {
      // A bug of this page: INTERNAL_ERROR, never its text, and never a half-drawn timeline.
      byId('run').replaceChildren();
      showVerdict({ ...core.errorAnswer(null), note: null }, files);
    }
    finish(mine);
  }

  function finish(mine) {
    if (mine !== generation) return;
    root.dataset.state = 'done';
    root.dataset.runs = String(Number(root.dataset.runs || '0') + 1);
  }

  function choose(role, file) {
    chosen[role] = file || null;
    refresh();
  }

  function wire() {
    for (const role of ROLES) {
      const input = inputOf(role);
      input.addEventListener('change', () => choose(role, input.files.length ? input.files[0] : null));
    }
    byId('show-break').addEventListener('click', () => {
      const broken = document.querySelector('#timeline .broken');
      if (broken !== null) broken.scrollIntoView({ block: 'center' });
    });
    byId('clear').addEventListener('click', () => {
      for (const role of ROLES) {
        inputOf(role).value = '';
        chosen[role] = null;
      }
      refresh();
    });
    // A file dropped on a field is that field's; dropped anywhere else, it is the log. The browser
    // never opens a dropped file in place of the page.
    document.addEventListener('dragover', (event) => {
      event.preventDefault();
      if (event.dataTransfer) event.dataTransfer.dropEffect = 'copy';
    });
    document.addEventListener('drop', (event) => {
      event.preventDefault();
      const files = event.dataTransfer ? event.dataTransfer.files : null;
      if (!files || files.length === 0) return;
      const zone = event.target instanceof Element ? event.target.closest('[data-drop]') : null;
      choose(zone === null ? 'log' : zone.dataset.drop, files[0]);
    });
  }

  if (!(globalThis.crypto && globalThis.crypto.subtle)) {
    idle('This browser offers no Web Crypto here, so nothing can be verified in this page.');
    root.dataset.verdict = 'unavailable';
    finish(generation);
    return;
  }
  wire();
  refresh();
})();
