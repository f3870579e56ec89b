// Renders deploy/helm/mxserve the way `helm template` does, for the small subset of Go
// templates the chart is written in, so CI (which has no helm binary: neither Debian nor npm
// ships one) can validate the result against the Kubernetes schemas. Anything outside the
// subset is an error, never a silent guess:
//   {{ PIPELINE }} / {{- ... -}} (whitespace trimming as in Go's text/template)
//   {{ if PIPELINE }} ... {{ else }} ... {{ end }}           (Go truthiness: false, 0, "", nil, empty)
//   PIPELINE := ARG [| quote] | toYaml ARG | nindent N | eq ARG ARG
//   ARG := .Values.a.b | .Release.Name | .Release.Namespace | .Chart.Name | "string" | number
// toYaml output is YAML-equivalent to helm's (sigs.k8s.io/yaml), not byte-identical.
// Usage: node render-chart.mjs CHART_DIR [--set key.path=value ...] [--release NAME] > out.yaml
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import YAML from "yaml";

const argv = process.argv.slice(2);
const chartDir = argv[0];
let release = "mxserve";
const sets = [];
for (let i = 1; i < argv.length; i++) {
  if (argv[i] === "--release") release = argv[++i];
  else if (argv[i] === "--set") sets.push(argv[++i]);
  else throw new Error(`unknown argument ${argv[i]}`);
}
const chart = YAML.parse(readFileSync(join(chartDir, "Chart.yaml"), "utf8"));
const values = YAML.parse(readFileSync(join(chartDir, "values.yaml"), "utf8")) ?? {};
for (const s of sets) {  // --set a.b=c (numbers and booleans typed as helm does)
  const [path, raw] = [s.slice(0, s.indexOf("=")), s.slice(s.indexOf("=") + 1)];
  const keys = path.split(".");
  let o = values;
  for (const k of keys.slice(0, -1)) o = o[k] ??= {};
  o[keys.at(-1)] = /^-?\d+$/.test(raw) ? Number(raw) : raw === "true" ? true : raw === "false" ? false : raw;
}
const root = { Values: values, Release: { Name: release, Namespace: "default", Service: "Helm" },
               Chart: { Name: chart.name, Version: chart.version } };

function fail(file, msg) { throw new Error(`${file}: ${msg}`); }

function lookup(file, path) {
  if (!path.startsWith(".")) fail(file, `unsupported argument '${path}'`);
  let o = root;
  for (const k of path.slice(1).split(".")) {
    if (o === undefined || o === null) return undefined;
    o = o[k];
  }
  return o;
}

function arg(file, tok) {
  if (/^"([^"\\]|\\.)*"$/.test(tok)) return JSON.parse(tok);
  if (/^-?\d+$/.test(tok)) return Number(tok);
  return lookup(file, tok);
}

function str(v) {  // Go's fmt of a template value
  if (v === undefined || v === null) return "<no value>";
  if (typeof v === "object") throw new Error("a map or list printed without toYaml");
  return String(v);
}

function evalPipeline(file, src) {
  const stages = src.split("|").map((s) => s.trim());
  const words = stages[0].match(/"([^"\\]|\\.)*"|\S+/g) ?? [];
  let v;
  if (words[0] === "toYaml" && words.length === 2) {
    const x = arg(file, words[1]);
    v = x === undefined || x === null ? "" : YAML.stringify(x, { sortMapEntries: true }).replace(/\n$/, "");
  } else if (words[0] === "eq" && words.length === 3) {
    v = arg(file, words[1]) === arg(file, words[2]);
  } else if (words.length === 1) {
    v = arg(file, words[0]);
  } else {
    fail(file, `unsupported pipeline '${src}'`);
  }
  for (const st of stages.slice(1)) {
    const w = st.split(/\s+/);
    if (w[0] === "quote" && w.length === 1) v = JSON.stringify(str(v));
    else if (w[0] === "nindent" && w.length === 2 && /^\d+$/.test(w[1])) {
      const pad = " ".repeat(Number(w[1]));
      v = "\n" + String(v).split("\n").map((l) => pad + l).join("\n");
    } else fail(file, `unsupported function '${st}'`);
  }
  return v;
}

function truthy(v) {
  return !(v === undefined || v === null || v === false || v === 0 || v === "" ||
           (Array.isArray(v) && v.length === 0) ||
           (typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0));
}

function render(file, text) {
  // Split into text and actions, applying {{- and -}} trimming.
  const parts = [];
  const re = /\{\{(-?)\s*([\s\S]*?)\s*(-?)\}\}/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    let before = text.slice(last, m.index);
    if (m[1] === "-") before = before.replace(/\s+$/, "");
    parts.push({ text: before });
    parts.push({ action: m[2], trimAfter: m[3] === "-" });
    last = re.lastIndex;
  }
  parts.push({ text: text.slice(last) });
  for (let i = 0; i < parts.length; i++) {
    if (parts[i].trimAfter && parts[i + 1]?.text !== undefined) {
      parts[i + 1].text = parts[i + 1].text.replace(/^\s+/, "");
    }
  }
  // Evaluate with an if/else/end stack.
  let out = "";
  const stack = [];  // {active, taken}
  const active = () => stack.every((s) => s.active);
  for (const p of parts) {
    if (p.text !== undefined) {
      if (active()) out += p.text;
      continue;
    }
    const a = p.action;
    if (a.startsWith("/*")) continue;  // comment
    if (/^if\s/.test(a)) {
      const cond = active() ? truthy(evalPipeline(file, a.slice(3))) : false;
      stack.push({ active: cond, taken: cond });
    } else if (a === "else") {
      const top = stack.at(-1) ?? fail(file, "else without if");
      top.active = !top.taken;
      top.taken = true;
    } else if (a === "end") {
      if (!stack.pop()) fail(file, "end without if");
    } else if (/^(range|with|define|template|include|block)\b/.test(a)) {
      fail(file, `unsupported action '${a}'`);
    } else if (active()) {
      out += str(evalPipeline(file, a));
    }
  }
  if (stack.length) fail(file, "if without end");
  return out;
}

const dir = join(chartDir, "templates");
const docs = [];
for (const f of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  docs.push(`---\n# Source: ${chart.name}/templates/${f}\n` + render(f, readFileSync(join(dir, f), "utf8")).trim() + "\n");
}
process.stdout.write(docs.join(""));
