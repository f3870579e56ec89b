#!/usr/bin/env node
// Fault bench: how fast mxserve notices a dead or hung worker, how long streams stall while
// calls fail over to a replica, and how long until the worker is SERVING again.
// Starts a coordinator with 3 local workers and 2 copies of each expert on the tiny model,
// keeps C greedy streams running, then SIGKILLs (or SIGSTOPs) one worker per trial:
//   detection = signal -> the coordinator's "worker I DOWN" log line (its own timestamp)
//   failover  = the longest gap between two tokens of any stream across the fault
//               (baseline: the longest gap in a quiet window of the same length)
//   kill      = SIGSTOP only: signal -> "does not answer ...: SIGKILL"
//   restart   = signal -> "worker I (pid P) SERVING again"
// Prints medians over N trials as a markdown table.
// Usage: node bench/fault/fault_bench.mjs BUILD_DIR [trials=5] [streams=4]
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const build = process.argv[2] || 'build';
const trials = Number(process.argv[3] || 5);
const streams = Number(process.argv[4] || 4);
const bin = join(build, 'bin');
const tmp = mkdtempSync(join(tmpdir(), 'mxserve-fault-bench-'));
const model = join(tmp, 'tiny');
execFileSync(join(bin, 'mxserve-make-model'), ['--preset', 'tiny', '--out', model, '--seed', '1']);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
};

const portFile = join(tmp, 'ports.json');
const coord = spawn(join(bin, 'mxserve-coordinator'), [
  '--model', model, '--host', '127.0.0.1', '--http-port', '0', '--grpc-port', '0',
  '--port-file', portFile, '--local-workers', '3', '--expert-replicas', '2',
  '--worker-threads', '1', '--max-restarts', '1000',
], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
coord.stderr.on('data', (d) => { log += d; });
let port = 0;
for (let i = 0; i < 1200 && !port; i++) {
  if (existsSync(portFile)) {
    const p = JSON.parse(readFileSync(portFile)).http_port;
    try { if ((await fetch(`http://127.0.0.1:${p}/health`)).ok) port = p; } catch {}
  }
  if (coord.exitCode !== null) throw new Error(`coordinator exited: ${log}`);
  if (!port) await sleep(100);
}
if (!port) throw new Error('coordinator did not start');

// Log lines after `from` (an offset into log) matching re, with their UTC times in epoch ms.
function linesAfter(from, re) {
  const out = [];
  const day = new Date(); day.setUTCHours(0, 0, 0, 0);
  for (const line of log.slice(from).split('\n')) {
    const m = line.match(/mxserve-coordinator: (\d\d):(\d\d):(\d\d)\.(\d\d\d) (.*)$/);
    if (!m || !re.test(m[5])) continue;
    out.push(day.getTime() + ((+m[1] * 60 + +m[2]) * 60 + +m[3]) * 1000 + +m[4]);
  }
  return out;
}
async function waitLine(from, re, boundMs) {
  const until = Date.now() + boundMs;
  while (Date.now() < until) {
    const t = linesAfter(from, re);
    if (t.length) return t[0];
    await sleep(5);
  }
  return NaN;
}
function pidOf(w) {
  let pid = 0;
  let n = 0;
  for (const line of log.split('\n')) {
    let m = line.match(/local worker pid (\d+) at /);
    if (m && n++ === w) pid = +m[1];
    m = line.match(/worker (\d+) restarted as pid (\d+)/);
    if (m && +m[1] === w) pid = +m[2];
  }
  return pid;
}

// Load: `streams` greedy streams in a loop; token arrival times per stream.
const arrivals = Array.from({ length: streams }, () => []);
let running = true;
let failures = 0;
async function streamLoop(i) {
  while (running) {
    const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt: [7 + i, 20, 30], max_tokens: 128,
                             temperature: 0, ignore_eos: true, stream: true }),
    });
    const dec = new TextDecoder();
    let last = null;
    for await (const chunk of r.body) {
      const text = dec.decode(chunk, { stream: true });
      if (text.includes('"error"')) failures++;
      const now = Date.now();
      for (const _ of text.matchAll(/^data: \{/gm)) arrivals[i].push([now, last]), last = now;
    }
  }
}
const loops = Array.from({ length: streams }, (_, i) => streamLoop(i));
// Longest gap between consecutive tokens of one request that ends inside [t0, t1].
function longestGap(t0, t1) {
  let worst = 0;
  for (const a of arrivals) for (const [t, prev] of a) if (prev !== null && t >= t0 && t <= t1) worst = Math.max(worst, t - prev);
  return worst;
}

await sleep(1500);
const quiet0 = Date.now();
await sleep(4000);
const baseline = longestGap(quiet0, Date.now());

const results = {};
for (const sig of ['SIGKILL', 'SIGSTOP']) {
  const r = { detect: [], stall: [], kill: [], restart: [] };
  for (let k = 0; k < trials; k++) {
    const w = k % 3;
    const from = log.length;
    const pid = pidOf(w);
    const t0 = Date.now();
    process.kill(pid, sig);
    const down = await waitLine(from, new RegExp(`^worker ${w} DOWN`), 10000);
    const killed = sig === 'SIGSTOP' ? await waitLine(from, new RegExp(`^worker ${w} .*does not answer`), 10000) : NaN;
    const up = await waitLine(from, new RegExp(`^worker ${w} \\(pid \\d+\\) SERVING again`), 20000);
    await sleep(1500);  // let the streams run past the fault
    r.detect.push(down - t0);
    r.kill.push(killed - t0);
    r.restart.push(up - t0);
    r.stall.push(longestGap(t0, Date.now()));
  }
  results[sig] = r;
}
running = false;
await Promise.allSettled(loops);
coord.kill('SIGTERM');
await sleep(500);
rmSync(tmp, { recursive: true, force: true });

const ms = (x) => (Number.isFinite(x) ? `${Math.round(x)} ms` : 'n/a');
console.log(`\nFault bench (tiny model, 3 local workers, --expert-replicas 2, ${streams} greedy streams, ` +
            `median of ${trials} faults each; quiet longest token gap ${ms(baseline)}; ` +
            `stream errors: ${failures})\n`);
console.log('| fault | detection (signal → DOWN) | longest token stall (failover) | SIGKILL of hung worker | restart (signal → SERVING again) |');
console.log('|---|---|---|---|---|');
for (const [sig, r] of Object.entries(results)) {
  console.log(`| ${sig} | ${ms(median(r.detect))} | ${ms(median(r.stall))} | ` +
              `${sig === 'SIGSTOP' ? ms(median(r.kill)) : '—'} | ${ms(median(r.restart))} |`);
}
