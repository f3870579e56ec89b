#!/usr/bin/env node
// End-to-end decode throughput of the tiny model: single-process vs N local workers, same load,
// one run. Starts each coordinator itself on free ports, sends C concurrent greedy completions
// of M tokens (ignore_eos), and prints a markdown table.
// Usage: node bench/e2e_decode.mjs BUILD_DIR [concurrency=8] [max_tokens=64]
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';

const build = process.argv[2] || 'build';
const concurrency = Number(process.argv[3] || 8);
const maxTokens = Number(process.argv[4] || 64);
const bin = join(build, 'bin');
const tmp = mkdtempSync(join(tmpdir(), 'mxserve-bench-'));
const model = join(tmp, 'tiny');
execFileSync(join(bin, 'mxserve-make-model'), ['--preset', 'tiny', '--out', model, '--seed', '1']);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function start(workers, stream, shm) {
  const portFile = join(tmp, `ports-${workers}-${stream}-${shm}.json`);
  const child = spawn(join(bin, 'mxserve-coordinator'), [
    '--model', model, '--host', '127.0.0.1', '--http-port', '0', '--grpc-port', '0',
    '--port-file', portFile, '--local-workers', String(workers), `--expert_call_stream=${stream}`,
    `--expert_shared_memory=${shm}`,
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  for (let i = 0; i < 1200; i++) {
    if (existsSync(portFile)) {
      const port = JSON.parse(readFileSync(portFile)).http_port;
      try {
        const r = await fetch(`http://127.0.0.1:${port}/health`);
        if (r.ok) return { child, port };
      } catch {}
    }
    if (child.exitCode !== null) throw new Error(`coordinator exited: ${log}`);
    await sleep(100);
  }
  throw new Error('coordinator did not start');
}

async function load(port) {
  const one = async (i) => {
    const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt: [10 + i, 20, 30, 40], max_tokens: maxTokens,
                             temperature: 0, ignore_eos: true }),
    });
    const j = await r.json();
    if (!r.ok) throw new Error(JSON.stringify(j));
    return j.usage.completion_tokens;
  };
  await one(0);  // warm-up
  const t0 = performance.now();
  const counts = await Promise.all(Array.from({ length: concurrency }, (_, i) => one(i)));
  const secs = (performance.now() - t0) / 1000;
  const tokens = counts.reduce((a, b) => a + b, 0);
  return { tokens, secs };
}

const rows = [];
// Expert calls to workers go over one RunExpertsStream per worker with the tensors in shared
// memory (the defaults), or, for comparison, with the tensors in the messages
// (--expert_shared_memory=false), or as one unary call each (--expert_call_stream=false).
for (const [workers, stream, shm] of [[0, true, true], [2, true, true], [2, true, false], [2, false, false]]) {
  const { child, port } = await start(workers, stream, shm);
  try {
    const { tokens, secs } = await load(port);
    const how = !stream ? 'unary calls' : shm ? 'stream, shared memory' : 'stream, tensors in the messages';
    const mode = workers === 0 ? 'single-process (experts in-process)' : `${workers} local workers (gRPC, ${how})`;
    rows.push([mode, concurrency, maxTokens, tokens, secs.toFixed(2), (tokens / secs).toFixed(1)]);
  } finally {
    child.kill('SIGTERM');
    await sleep(500);
  }
}
rmSync(tmp, { recursive: true, force: true });
console.log(`# e2e decode, tiny model — ${new Date().toISOString()} — ${cpus()[0].model} x${cpus().length}`);
console.log('| mode | concurrent requests | max_tokens | tokens | seconds | tokens/s |');
console.log('| --- | --- | --- | --- | --- | --- |');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
