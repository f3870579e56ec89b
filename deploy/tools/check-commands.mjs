// Runs the shell snippets of rendered manifests (the coordinator's --workers list, each worker's
// expert slice) with stand-in binaries that print their arguments, and checks the result:
// every expert held by exactly EXPERT_REPLICAS workers, --workers naming every StatefulSet pod,
// every worker on DEVICE (default cuda:0) with one nvidia.com/gpu requested and limited exactly
// when DEVICE is a GPU.
// Usage: node check-commands.mjs RENDERED.yaml WORKERS EXPERT_REPLICAS NUM_EXPERTS RELEASE [DEVICE]
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const [file, workersS, replicasS, expertsS, release, device = "cuda:0"] = process.argv.slice(2);
const [W, R, E] = [Number(workersS), Number(replicasS), Number(expertsS)];
const docs = parseAllDocuments(readFileSync(file === "-" ? 0 : file, "utf8")).map((d) => d.toJS());
const dep = docs.find((d) => d?.kind === "Deployment").spec.template.spec.containers[0];
const ss = docs.find((d) => d?.kind === "StatefulSet");
const wc = ss.spec.template.spec.containers[0];
const envOf = (c) => Object.fromEntries((c.env ?? []).filter((e) => "value" in e).map((e) => [e.name, e.value]));

const bin = mkdtempSync(join(tmpdir(), "mxserve-fake-"));
for (const b of ["mxserve-coordinator", "mxserve-worker"]) {
  writeFileSync(join(bin, b), '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n');
  chmodSync(join(bin, b), 0o755);
}
const run = (c, extra) => execFileSync(c.command[0], [...c.command.slice(1), ...(c.args ?? [])], {
  env: { PATH: `${bin}:/usr/bin:/bin`, ...envOf(c), ...extra }, encoding: "utf8" }).trim().split("\n");

let bad = 0;
const check = (ok, msg) => { if (!ok) { console.error(`check-commands: ${msg}`); bad++; } };
check(ss.spec.replicas === W, `StatefulSet replicas ${ss.spec.replicas} != ${W}`);
const coord = run(dep, {});
const workersArg = coord.find((a) => a.startsWith("--workers="));
const want = Array.from({ length: W }, (_, i) => `${release}-worker-${i}.${release}-workers:50061`).join(",");
check(workersArg === `--workers=${want}`, `coordinator ${workersArg} != --workers=${want}`);
const held = new Array(E).fill(0);
for (let i = 0; i < W; i++) {
  const args = run(wc, { HOSTNAME: `${release}-worker-${i}` });
  const spec = args[args.indexOf("--experts") + 1];
  const devices = args.flatMap((a, j) => a === "--device" ? [args[j + 1]] : a.startsWith("--device=") ? [a.slice(9)] : []);
  check(devices.length === 1 && devices[0] === device, `worker ${i}: --device ${devices.join(" ")}, want ${device}`);
  const [a, b] = spec.split("-").map(Number);
  check(Number.isInteger(a) && Number.isInteger(b) && a <= b, `worker ${i}: bad --experts ${spec}`);
  for (let e = a; e <= b; e++) held[e]++;
}
check(held.every((n) => n === R), `experts not held exactly ${R} times: ${held.join(",")}`);
const gpus = ["requests", "limits"].map((k) => wc.resources?.[k]?.["nvidia.com/gpu"]);
const wantGpus = device.startsWith("cuda:") ? 1 : undefined;
check(gpus.every((g) => g === wantGpus),
      `worker nvidia.com/gpu requests/limits ${gpus.join("/")}, want ${wantGpus ?? "none"} for ${device}`);
console.log(`check-commands: ${file}: ${W} workers x ${E} experts, replicas ${R}, on ${device}: ${bad ? "FAILED" : "ok"}`);
process.exit(bad ? 1 : 0);
