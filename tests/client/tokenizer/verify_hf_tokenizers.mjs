// Cross-checks the tokenizer.json files our C++ writes (the TikTokenConverter-shaped o200k_harmony
// file and the tiny model's) with Hugging Face's tokenizers.js, an independent tokenizer.json
// implementation: o200k ids must equal tiktoken's, tiny ids must equal our C++ tokenizer's.
// Usage: node verify_hf_tokenizers.mjs WORK_DIR CASES_JSONL
import fs from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [work, casesPath] = process.argv.slice(2);
const load = (dir) => new Tokenizer(JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`, "utf8")),
                                    JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8")));
const o200k = load(`${work}/o200k_harmony`);
const tiny = load(`${work}/tiny`);
const cases = fs.readFileSync(casesPath, "utf8").trim().split("\n").map((l) => JSON.parse(l));
const tinyIds = fs.readFileSync(`${work}/tiny_ids.jsonl`, "utf8").trim().split("\n").map((l) => JSON.parse(l));

let checked = 0, skipped = 0, bad = 0, badTiny = 0;
const encode = (tok, text) => tok.encode(text, { add_special_tokens: false }).ids;
cases.forEach((c, i) => {
  const t = c.text;
  // tokenizers.js runs the pattern as a JS regex: it differs from Rust/Oniguruma on U+0085 like
  // js-tiktoken does. Reserved specials past 200018 are not in gpt-oss's tokenizer.json.
  if (/\u0085/.test(t) || /<\|reserved_(2000(1[89]|[2-9]\d)|200[1-9]\d\d|201\d\d\d)\|>/.test(t)) {
    skipped++;
    return;
  }
  checked++;
  const got = encode(o200k, t);
  if (got.join() !== c.special.join()) {
    if (++bad <= 5) console.error(`o200k tokenizer.json differs on ${JSON.stringify(t)}\n  want ${c.special}\n  got  ${got}`);
  }
  const gotTiny = encode(tiny, t);
  if (gotTiny.join() !== tinyIds[i].join()) {
    if (++badTiny <= 5) console.error(`tiny tokenizer.json differs on ${JSON.stringify(t)}\n  ours ${tinyIds[i]}\n  hf   ${gotTiny}`);
  }
});
console.log(`tokenizers.js: ${checked} cases checked (${skipped} skipped): o200k_harmony ` +
            `tokenizer.json ${bad} mismatches vs tiktoken; tiny tokenizer.json ${badTiny} mismatches vs ours`);
process.exit(bad || badTiny ? 1 : 0);
