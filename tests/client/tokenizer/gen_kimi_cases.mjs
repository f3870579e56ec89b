// Kimi tiktoken-format exactness fixtures. Trains a small byte-level BPE (seeded) on a generated
// multilingual corpus, writes it as a Kimi tokenizer folder (tiktoken.model ranks,
// tokenizer_config.json with Kimi K2's added_tokens_decoder), and writes generated strings with
// their ids from two independent encoders given the same ranks: tiktoken (OpenAI's Rust core as
// WASM; Rust regex honours the pattern's `&&` class intersections as tokenization_kimi.py's
// tiktoken does) and js-tiktoken (JS regexes, given the pattern rewritten for JS).
// Usage: node gen_kimi_cases.mjs OUT_DIR [COUNT] [SEED]   (OUT_DIR/cases.jsonl: {text, ids,
// ordinary, js_agrees}; ids with special-token strings recognized, ordinary with none)
import fs from "node:fs";
import { createRequire } from "node:module";
import { Tiktoken as JsTiktoken } from "js-tiktoken/lite";
import { makeCorpus } from "./generated_text.mjs";

const require = createRequire(import.meta.url);
const { Tiktoken: WasmTiktoken } = require("tiktoken/lite");

const outDir = process.argv[2];
const count = Number(process.argv[3] || 4000);
const seed = Number(process.argv[4] || 20261206);

// tokenization_kimi.py's pat_str, verbatim (Rust-regex dialect).
const KIMI_PAT = [
  "[\\p{Han}]+",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "\\p{N}{1,3}",
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*",
  "\\s*[\\r\\n]+",
  "\\s+(?!\\S)",
  "\\s+",
].join("|");
// The same for JS ("u" flag): intersection as a lookahead, bare script as Script=, and the
// case-insensitive suffixes spelled out (Rust's (?i) s also matches U+017F).
const JS_PAT = KIMI_PAT
  .replace(/\[(\\p\{Lu\}\\p\{Lt\}\\p\{Lm\}\\p\{Lo\}\\p\{M\}|\\p\{Ll\}\\p\{Lm\}\\p\{Lo\}\\p\{M\})&&\[\^\\p\{Han\}\]\]/g,
           "(?:(?!\\p{sc=Han})[$1])")
  .replace(/\[\\p\{Han\}\]/g, "[\\p{sc=Han}]")
  .replaceAll("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'[sS\u017f]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])");

// The JS rewrite is the set intersection (JS's own "v"-flag `&&`) on every scalar value.
if (JS_PAT.includes("&&") || JS_PAT.includes("(?i")) throw new Error("JS pattern not rewritten");
for (const cls of ["\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}", "\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}"]) {
  const inter = new RegExp(`^[[${cls}]&&[^\\p{sc=Han}]]$`, "v");
  const ahead = new RegExp(`^(?:(?!\\p{sc=Han})[${cls}])$`, "u");
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    if (inter.test(c) !== ahead.test(c)) throw new Error(`class rewrite differs at U+${cp.toString(16)}`);
  }
}

// Kimi K2's named specials (tokenizer_config.json added_tokens_decoder), past a 163,584-rank
// vocabulary; here they follow the synthetic ranks at the same offsets.
const NAMED = { 0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
  6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
  11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
  14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
  22: "<think>", 23: "</think>", 254: "[UNK]", 255: "[PAD]" };

const { gens, names } = makeCorpus(seed, Object.values(NAMED).concat(["<|reserved_token_163600|>"]));

// ---- a small BPE trained on the generated corpus (pieces from the JS form of the pattern) ----
const splitRe = new RegExp(JS_PAT, "gu");
const pieceCount = new Map();
for (let i = 0; i < 3000; i++) {
  for (const m of gens[names[i % names.length]]().matchAll(splitRe))
    pieceCount.set(m[0], (pieceCount.get(m[0]) || 0) + 1);
}
const vocab = [];  // rank -> Buffer
const idOf = new Map();  // token bytes (latin1) -> rank
for (let b = 0; b < 256; b++) { vocab.push(Buffer.from([b])); idOf.set(Buffer.from([b]).toString("latin1"), b); }
let seqs = [...pieceCount].map(([p, c]) => ({ ids: [...Buffer.from(p)], c }));
const MERGES = 3000;
for (let m = 0; m < MERGES; m++) {
  const pairs = new Map();
  for (const s of seqs)
    for (let i = 0; i + 1 < s.ids.length; i++) {
      const k = s.ids[i] * 65536 + s.ids[i + 1];
      pairs.set(k, (pairs.get(k) || 0) + s.c);
    }
  let best = -1, bestC = 1;
  for (const [k, c] of pairs) if (c > bestC || (c === bestC && best >= 0 && k < best)) { best = k; bestC = c; }
  if (best < 0) break;
  const a = Math.floor(best / 65536), b = best % 65536;
  const bytes = Buffer.concat([vocab[a], vocab[b]]);
  const key = bytes.toString("latin1");
  // The same bytes reached by another pair keep their one rank.
  if (!idOf.has(key)) { idOf.set(key, vocab.length); vocab.push(bytes); }
  const id = idOf.get(key);
  for (const s of seqs) {
    const out = [];
    for (let i = 0; i < s.ids.length; i++) {
      if (i + 1 < s.ids.length && s.ids[i] === a && s.ids[i + 1] === b) { out.push(id); i++; }
      else out.push(s.ids[i]);
    }
    s.ids = out;
  }
}
const nBase = vocab.length;
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(`${outDir}/tiktoken.model`,
                 vocab.map((v, r) => `${v.toString("base64")} ${r}`).join("\n") + "\n");
const decoder = {};
const specialMap = {};
for (let i = 0; i < 256; i++) {
  const content = NAMED[i] ?? `<|reserved_token_${nBase + i}|>`;
  specialMap[content] = nBase + i;
  if (NAMED[i]) decoder[String(nBase + i)] = { content, lstrip: false, normalized: false,
                                               rstrip: false, single_word: false, special: true };
}
fs.writeFileSync(`${outDir}/tokenizer_config.json`, JSON.stringify({
  added_tokens_decoder: decoder, bos_token: "[BOS]", eos_token: "[EOS]", pad_token: "[PAD]",
  unk_token: "[UNK]", tokenizer_class: "TikTokenTokenizer" }, null, 1));

// ---- cases ----
const wasm = new WasmTiktoken(vocab.map((v, r) => `${v.toString("base64")} ${r}`).join("\n"),
                              specialMap, KIMI_PAT);
const js = new JsTiktoken({ pat_str: JS_PAT, special_tokens: specialMap,
                            bpe_ranks: "! 0 " + vocab.map((v) => v.toString("base64")).join(" ") });
const fixed = ["Hello world", "你好世界", "你、好", "Tell me about the french revolution.",
  "<|im_user|>user<|im_middle|>Tell me about the french revolution.<|im_end|><|im_assistant|>assistant<|im_middle|>",
  "", " ", "\n", "I'm", "HELLO'S", "Straße中文a中b", "々〆〇"];
const lines = [];
let disagreements = 0;
for (let i = 0; i < count + fixed.length; i++) {
  const kind = i < fixed.length ? "fixed" : names[(i - fixed.length) % names.length];
  const text = i < fixed.length ? fixed[i] : gens[kind]();
  const ids = Array.from(wasm.encode(text, "all"));
  const ordinary = Array.from(wasm.encode_ordinary(text));
  const jsAgrees = ids.join() === Array.from(js.encode(text, "all")).join() &&
                   ordinary.join() === Array.from(js.encode(text, [], [])).join();
  if (!jsAgrees) {
    disagreements++;
    if (!/\u0085/.test(text) && disagreements <= 5)
      console.error("oracles disagree (no U+0085 involved) on", JSON.stringify(text));
  }
  lines.push(JSON.stringify({ kind, text, ids, ordinary, js_agrees: jsAgrees }));
}
wasm.free();
fs.writeFileSync(`${outDir}/cases.jsonl`, lines.join("\n") + "\n");
console.log(`Kimi-format BPE: ${nBase} ranks + 256 specials; ${lines.length} cases; ` +
            `js-tiktoken differed from tiktoken on ${disagreements}`);
if (disagreements > count / 20) process.exit(1);
