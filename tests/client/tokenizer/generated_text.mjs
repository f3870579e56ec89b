// Seeded generated strings for tokenizer exactness tests: CJK (with Han-adjacent code points such
// as U+3001, U+3005, U+3006), mixed scripts, digits, whitespace runs (U+0085 included), emoji,
// combining marks, code, and special-token strings mixed into text.
// makeCorpus(seed, specials) -> {gens: {kind: () => string}, names}
// mulberry32(seed) -> () => a number in [0, 1), the same sequence for the same seed.
export function mulberry32(seedIn) {
  let seed = seedIn >>> 0;
  return () => {
    seed = (seed + 0x6d2b79f5) >>> 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function makeCorpus(seedIn, specials) {
  const rand = mulberry32(seedIn);
  const ri = (n) => Math.floor(rand() * n);
  const pick = (a) => a[ri(a.length)];
  const rep = (n, f) => Array.from({ length: n }, f).join("");

  const words = ["the", "quick", "brown", "fox", "model", "expert", "token", "serving", "Hello",
    "World", "Kimi", "Moonshot", "GPU", "iPhone", "naïve", "café", "Straße", "ÆSIR", "Ǆemal", "ǅ",
    "HTTPServer", "camelCase", "snake_case", "I", "don", "we", "they"];
  const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'ſ", "'x", "’s"];
  const punct = [".", ",", "!", "?", "...", "—", "(", ")", "\"", "«", "»", "“", "”", "…", "/", "&"];
  const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0",
    "\u3000", "\u0085", "\u2028", "\u000b", " \r\n \r\n"];
  const scripts = ["你好世界", "今天天气很好", "我们去公园散步吧", "機械学習", "こんにちは", "カタカナ",
    "日本語のテキスト", "中文，标点。符号！", "你、好", "々", "〆", "〇一二", "〃", "漢字かな交じり",
    "𠀀𠀁𪜀", "⺀⻳", "㐀㐁", "한국어", "안녕하세요", "مرحبا بالعالم", "नमस्ते", "हिन्दी", "ภาษาไทย",
    "Ελληνικά", "Привет", "мир", "שלום", "Tiếng Việt", "ქართული", "ᚠᚢᚦ", "ꦗꦮ", "ㄅㄆㄇ"];
  const emoji = ["😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "✨", "🚀", "🇯🇵", "1️⃣", "™", "💯"];
  const marks = ["\u0301", "\u0308", "\u0327", "\u093f", "\u094d", "\u0e31", "\u064b", "\u3099",
    "\u302a", "\ufe0f"];
  const code = ["def ", "return ", "if (", ") {", "}", "    ", "for i in range(10):", "x = ",
    "std::vector<int>", "->", "=>", "&&", "#include <stdio.h>", "//", "printf(\"%d\\n\", x);",
    "SELECT * FROM t WHERE id = 42;", "{\"key\": [1, 2.5, null]}", "0x1F", "i++", "fn main() {\n"];

  function number() {
    let s = rep(1 + ri(rand() < 0.8 ? 10 : 40), () => String(ri(10)));
    const r = rand();
    if (r < 0.2) s = "-" + s + "." + rep(1 + ri(4), () => String(ri(10)));
    else if (r < 0.3) s = "٣٤٥" + s + "१२३";
    else if (r < 0.4) s = "½²" + s + "五六";
    return s;
  }
  function word() {
    let w = pick(words);
    if (rand() < 0.15) w = w.toUpperCase();
    if (rand() < 0.15) w += pick(contractions);
    return w;
  }
  const gens = {
    prose: () => rep(1 + ri(20), () => (rand() < 0.85 ? " " : pick(spaces)) + word() +
                                        (rand() < 0.2 ? pick(punct) : "")).slice(ri(2)),
    code: () => rep(1 + ri(15), () => pick(code) + (rand() < 0.3 ? pick(spaces) : "") +
                                       (rand() < 0.3 ? word() : "")),
    numbers: () => rep(1 + ri(6), () => number() + pick([" ", "", ",", "\n", "/", "年"])),
    whitespace: () => pick(spaces) + rep(1 + ri(5), () => word() + rep(1 + ri(3), () => pick(spaces))),
    cjk: () => rep(1 + ri(8), () => pick(scripts) + pick([" ", "", "，", "。", "\n", "a", "A", "1"])),
    mixed_script: () => rep(1 + ri(10), () => pick([pick(scripts), word(), pick(emoji), number()])),
    emoji: () => rep(1 + ri(8), () => pick(emoji) + (rand() < 0.4 ? pick([" ", "", word()]) : "")),
    marks: () => rep(1 + ri(8), () => pick(["e", "a", "中", "か", "क", "A", " ", "5"]) +
                                       rep(1 + ri(2), () => pick(marks))),
    specials: () => rep(1 + ri(5), () => (rand() < 0.6 ? pick(specials) : "") +
                                          gens[pick(["prose", "cjk", "code"])]()),
  };
  const names = Object.keys(gens);
  return { gens, names };
}
