// Scores one conformance run from the suite's own result files. Called by run.sh:
//
//   node summarize.mjs PKG_DIR LEG REQUIREMENTS RESULTS_DIR SUITE_RC LOG [LEG ...]
//
// (five words per leg after PKG_DIR; REQUIREMENTS is a revision such as 2025-11-25 for a
// server-mode leg, client:2025-11-25 for a client-mode leg, `scenarios:A,B,...` for a
// server-mode leg of `--suite all` whose named scenarios are counted (the tasks extension's,
// which no requirement set scores) and the rest listed, `each:A,B,...` for a server-mode leg
// that ran exactly those scenarios one `--scenario` at a time (no summary is printed then),
// or "-" for an informational leg, which is listed but never counted).
//
// A leg's scored scenarios are the `server:` (or `client:`) list of the installed package's
// requirements/<REVISION>.yaml, the frozen set the suite itself scores. A server scenario
// passes when none of the checks in its RESULTS_DIR/server-<scenario>-<timestamp>/checks.json
// is FAILURE (WARNING does not fail server mode, as in the suite). A client scenario's
// results are in RESULTS_DIR/<scenario>-<timestamp>/ (auth/<name>-<timestamp>/ for auth
// scenarios), and a WARNING fails it too, as the suite's client mode does. A scored
// scenario without a checks.json fails. The suite's exit status is then used as a cross-check: with
// --requirements it exits 1 exactly when a scored scenario has a FAILURE, so a disagreement
// (or a crash, a timeout, a missing `=== SUMMARY ===`) means the run cannot be trusted, and
// the closing line becomes `0 passed, 1 failed`.
//
// Prints, per leg: every check of every scenario (the suite's own stdout has no per-check
// lines), then a table of the scored scenarios; and last, exactly one `N passed, N failed`.
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

// Whatever goes wrong in here, the run must still end with a closing line that fails it.
process.on('uncaughtException', (e) => {
  console.log(`summarize.mjs: ${e.stack ?? e}`);
  console.log('0 passed, 1 failed');
  process.exit(1);
});

const [pkgDir, ...rest] = process.argv.slice(2);
if (!pkgDir || rest.length === 0 || rest.length % 5 !== 0) {
  console.error('usage: summarize.mjs PKG_DIR (LEG REQUIREMENTS RESULTS_DIR SUITE_RC LOG)...');
  console.log('0 passed, 1 failed');
  process.exit(1);
}
// The suite depends on `yaml`, so it is installed next to it.
const YAML = createRequire(path.join(pkgDir, 'package.json'))('yaml');

const STAMP = '(\\d{4}-\\d{2}-\\d{2}T\\d{2}-\\d{2}-\\d{2}-\\d{3}Z)';
const SERVER_DIR = new RegExp(`^server-(.+)-${STAMP}$`);
const CLIENT_DIR = new RegExp(`^(.+)-${STAMP}$`);
const oneLine = (s) => String(s ?? '').replace(/\s+/g, ' ').trim();
const clip = (s, n = 300) => (s.length > n ? s.slice(0, n - 1) + '…' : s);

/** scenario name -> { checks, error }, the latest run of each scenario in `dir`. */
function readResults(dir, mode) {
  const found = new Map();
  const entries = (sub) => (existsSync(path.join(dir, sub)) ? readdirSync(path.join(dir, sub)).sort() : [])
    .map((entry) => [path.join(sub, entry), sub ? `${sub}/` : '']);
  const all = mode === 'client' ? [...entries(''), ...entries('auth')] : entries('');
  for (const [entry, prefix] of all) {
    const m = (mode === 'client' ? CLIENT_DIR : SERVER_DIR).exec(path.basename(entry));
    if (!m || (mode === 'client' && m[1] === 'auth')) continue;
    const file = path.join(dir, entry, 'checks.json');
    let result;
    try {
      const checks = JSON.parse(readFileSync(file, 'utf8'));
      if (!Array.isArray(checks)) throw new Error('not an array');
      result = { checks };
    } catch (e) {
      result = { checks: [], error: `unreadable ${file}: ${e.message}` };
    }
    found.set(prefix + m[1], result); // sorted by timestamp, so a later run wins
  }
  return found;
}

function verdict(result, mode) {
  if (!result) return { pass: false, why: 'no checks.json (scenario did not run or crashed)' };
  if (result.error) return { pass: false, why: result.error };
  const failing = result.checks.filter(
    (c) => c.status === 'FAILURE' || (mode === 'client' && c.status === 'WARNING'),
  );
  return { pass: failing.length === 0, failing };
}

function counts(result) {
  const by = (s) => (result ? result.checks.filter((c) => c.status === s).length : 0);
  return `${by('SUCCESS')}/${by('FAILURE')}/${by('WARNING')}`;
}

let passed = 0;
let failed = 0;
const broken = [];

for (let i = 0; i < rest.length; i += 5) {
  const [leg, revText, dir, rcText, log] = rest.slice(i, i + 5);
  const rc = Number(rcText);
  const mode = revText.startsWith('client:') ? 'client' : 'server';
  const rev = revText.replace(/^client:/, '');
  const results = readResults(dir, mode);
  // A `scenarios:` leg counts the scenarios it names; its suite ran every scenario, so its
  // exit status says nothing about them and is not cross-checked.
  const each = rev.startsWith('each:');
  const named = rev.startsWith('scenarios:') || each ? rev.slice(rev.indexOf(':') + 1).split(',') : null;
  const scored = rev === '-' ? null : named ? { list: named, reasons: new Map() } : requirements(rev, mode);

  console.log(`\n==================== ${leg}: every check (results in ${dir}) ====================`);
  for (const [name, result] of [...results].sort(([a], [b]) => a.localeCompare(b))) {
    const tag = scored && !scored.list.includes(name) ? ' (not scored)' : '';
    console.log(`${name}${tag}`);
    if (result.error) console.log(`  ERROR    ${result.error}`);
    for (const c of result.checks) {
      const msg = c.errorMessage ? `: ${clip(oneLine(c.errorMessage), 500)}` : '';
      console.log(`  ${String(c.status).padEnd(8)} ${c.id}${msg}`);
    }
  }

  console.log(`\n==================== ${leg}: ${scored ? 'scored scenarios' : 'all scenarios (informational, not counted)'} ====================`);
  console.log(`${'result'.padEnd(6)}  ${'checks S/F/W'.padEnd(12)}  scenario`);
  const names = scored ? scored.list : [...results.keys()].sort();
  let legPassed = 0;
  let legFailed = 0;
  for (const name of names) {
    const result = results.get(name);
    const v = verdict(result, mode);
    if (v.pass) legPassed++;
    else legFailed++;
    console.log(`${(v.pass ? 'pass' : 'FAIL').padEnd(6)}  ${counts(result).padEnd(12)}  ${name}`);
    if (v.why) console.log(`${' '.repeat(22)}${v.why}`);
    for (const c of v.failing ?? []) {
      console.log(`${' '.repeat(22)}${c.id}: ${clip(oneLine(c.errorMessage ?? '(no errorMessage)'))}`);
    }
  }
  console.log(`${leg}: ${legPassed}/${names.length} ${scored ? 'scored ' : ''}scenarios passed`);
  if (scored) {
    const extra = [...results.keys()].filter((n) => !scored.list.includes(n)).sort();
    if (extra.length) {
      const desc = extra.map((n) => {
        const why = scored.reasons.get(n) ?? (named ? 'run with the suite, not counted' : 'not in the requirement set');
        return `${n} ${verdict(results.get(n), mode).pass ? 'pass' : 'fail'} (${why})`;
      });
      console.log(`${leg}: not scored, run for visibility: ${desc.join('; ')}`);
    }
  }

  // Can this leg be trusted?
  let logText = '';
  try { logText = readFileSync(log, 'utf8'); } catch { /* handled below */ }
  const problems = [];
  if (rc === 124 || rc === 137) problems.push(`the suite timed out (exit ${rc})`);
  else if (rc !== 0 && rc !== 1) problems.push(`the suite exited ${rc}`);
  if (!each && !/=== (SUITE )?SUMMARY ===/.test(logText)) problems.push(`the suite printed no "=== SUMMARY ===" (crashed?); see ${log}`);
  if (results.size === 0) problems.push(`no results in ${dir}`);
  if (scored && !named && problems.length === 0) {
    if (rc === 1 && legFailed === 0) problems.push('the suite exited 1 but no scored scenario has a FAILURE check');
    if (rc === 0 && legFailed > 0) problems.push(`the suite exited 0 but ${legFailed} scored scenario(s) have FAILURE checks`);
  }
  for (const p of problems) console.log(`${leg}: NOT TRUSTED: ${p}`);
  if (problems.length) broken.push(leg);
  if (scored) {
    passed += legPassed;
    failed += legFailed;
  }
}

function requirements(rev, mode) {
  const file = path.join(pkgDir, 'requirements', `${rev}.yaml`);
  const doc = YAML.parse(readFileSync(file, 'utf8'));
  const list = doc?.[mode];
  if (!Array.isArray(list) || list.length === 0) throw new Error(`${file}: no ${mode} list`);
  const reasons = new Map(
    (doc.not_scored ?? []).filter((e) => e.leg === mode).map((e) => [e.scenario, e.reason]),
  );
  return { list, reasons };
}

// Problems run.sh saw outside the suite (e.g. the server exited mid-leg).
for (const p of (process.env.RUN_PROBLEMS ?? '').split('\n').filter(Boolean)) {
  console.log(`run.sh: NOT TRUSTED: ${p}`);
  broken.push('run.sh');
}

console.log('');
if (broken.length) {
  console.log(`summarize: counted ${passed} passed, ${failed} failed, but the run cannot be trusted (${broken.join(', ')}: see NOT TRUSTED above)`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
