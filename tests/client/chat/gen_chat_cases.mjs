// Chat template exactness fixtures: generated conversations (system, developer, user, assistant
// text and tool-call turns, tool results, names, tools; unicode, whitespace runs and
// special-token strings in the text) rendered by @huggingface/jinja with a model's published
// template (templates/*.jinja), from the inputs vLLM hands such a template: tools as pydantic's
// model_dump writes them, and for Kimi tool-call arguments parsed from their JSON text.
// Writes one JSON line per case: {kind, messages (OpenAI wire form), tools?,
// add_generation_prompt, expected, content_spells_marker}.
// Usage: node gen_chat_cases.mjs kimi_k2|kimi_linear|deepseek_v3 OUT_JSONL [COUNT] [SEED]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { makeCorpus, mulberry32 } from "../tokenizer/generated_text.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const [format, outPath] = process.argv.slice(2, 4);
const count = Number(process.argv[4] || 2000);
const seed = Number(process.argv[5] || 20261208);
const templateFile = { kimi_k2: "kimi_k2.jinja", kimi_linear: "kimi_linear.jinja",
                       deepseek_v3: "deepseek_v3.jinja" }[format];
if (!templateFile || !outPath) {
  console.error("usage: node gen_chat_cases.mjs kimi_k2|kimi_linear|deepseek_v3 OUT_JSONL [COUNT] [SEED]");
  process.exit(2);
}
const template = new Template(fs.readFileSync(path.join(here, "templates", templateFile), "utf8"));
const isKimi = format !== "deepseek_v3";

const markers = ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
  "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
  "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<｜begin▁of▁sentence｜>",
  "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
  "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
  "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
  "<｜tool▁output▁end｜>"];
const { gens, names } = makeCorpus(seed, markers);
const rand = mulberry32(seed ^ 0x5bd1e995);
const ri = (n) => Math.floor(rand() * n);
const pick = (a) => a[ri(a.length)];
const text = () => (rand() < 0.1 ? pick(["", " ", "\n", "Hi"]) : gens[pick(names)]());

// Argument and schema values JSON round-trips identically in Python and JS: no floats that
// print differently (1.0, 1e21), no integer-like object keys (JS orders those first).
function value(depth) {
  const r = ri(depth > 2 ? 4 : 6);
  if (r === 0) return text();
  if (r === 1) return ri(2000) - 1000;
  if (r === 2) return pick([true, false, null, 0.5, -2.25, 3.75]);
  if (r === 3) return pick(["Beijing", "Z\u00fcrich", "\u5317\u4eac", "a\"b\\c", "tab\there"]);
  if (r === 4) return Array.from({ length: ri(3) }, () => value(depth + 1));
  const o = {};
  for (let k = ri(3); k > 0; k--) o[pick(["city", "unit", "q", "\u540d\u524d", "x_y", "nested"])] = value(depth + 1);
  return o;
}

function makeTools() {
  const tools = [];
  for (let k = ri(4); k > 0; k--) {
    const fn = { name: pick(["get_weather", "search", "run_code", "lookup_\u7528\u6237"]) };
    if (rand() < 0.8) fn.description = text();
    if (rand() < 0.9) {
      fn.parameters = { type: "object", properties: { city: { type: "string", description: text() } },
                        required: ["city"] };
    }
    tools.push({ type: "function", function: fn });
  }
  return tools;
}

// vLLM's view of the tools (pydantic model_dump: declared fields first, nulls kept).
function toolsView(tools) {
  return tools.map((t) => {
    const { name, description = null, parameters = null, ...rest } = t.function;
    const { type, function: _f, ...extra } = t;
    return { type, function: { name, description, parameters, ...rest }, ...extra };
  });
}

function makeConversation() {
  const msgs = [];
  if (rand() < 0.6) msgs.push({ role: "system", content: text() });
  if (rand() < 0.1) msgs.push({ role: "developer", content: text() });
  let callNo = 0;
  for (let turns = 1 + ri(4); turns > 0; turns--) {
    const user = { role: "user", content: text() };
    if (rand() < 0.15) user.name = pick(["alice", "\u5f20\u4e09"]);
    msgs.push(user);
    if (rand() < 0.1) msgs.push({ role: "system", content: text() });
    if (turns === 1 && rand() < 0.5) break;  // ends with the user: the usual request
    if (rand() < 0.45) {
      const calls = [];
      for (let k = 1 + ri(3); k > 0; k--) {
        const name = pick(["get_weather", "search", "run_code"]);
        const args = rand() < 0.1 ? pick(["", "not json {", "[1, 2]"]) : JSON.stringify(value(0));
        calls.push({ id: `functions.${name}:${callNo++}`, type: "function",
                     function: { name, arguments: args } });
      }
      const withText = rand() < 0.3;
      msgs.push({ role: "assistant", content: withText ? text() || "ok" : null, tool_calls: calls });
      for (const c of calls) {
        const res = { role: "tool", tool_call_id: c.id, content: text() };
        if (rand() < 0.6) res.name = c.function.name;
        msgs.push(res);
      }
      if (rand() < 0.7) msgs.push({ role: "assistant", content: text() });
    } else {
      msgs.push({ role: "assistant", content: text() });
    }
  }
  return msgs;
}

// The messages as vLLM hands them to the template.
function messagesView(msgs) {
  return msgs.map((m) => {
    const v = { ...m };
    if (m.tool_calls && isKimi) {
      v.tool_calls = m.tool_calls.map((c) => {
        let args = c.function.arguments;
        if (args === "") args = {};
        else { try { args = JSON.parse(args); } catch { /* not JSON: the text itself */ } }
        return { ...c, function: { ...c.function, arguments: args } };
      });
    }
    return v;
  });
}

const lines = [];
for (let i = 0; i < count; i++) {
  const messages = makeConversation();
  const tools = rand() < 0.4 ? makeTools() : [];
  const add_generation_prompt = rand() < 0.8;
  const ctx = { messages: messagesView(messages), add_generation_prompt,
                bos_token: "<｜begin▁of▁sentence｜>", eos_token: "<｜end▁of▁sentence｜>" };
  if (tools.length) ctx.tools = toolsView(tools);
  const expected = template.render(ctx);
  const strings = JSON.stringify([messages, tools]);
  const content_spells_marker = markers.some((m) => strings.includes(m));
  const c = { kind: format, messages, add_generation_prompt, expected, content_spells_marker };
  if (tools.length) c.tools = tools;
  lines.push(JSON.stringify(c));
}
fs.writeFileSync(outPath, lines.join("\n") + "\n");
console.log(`${format}: ${count} cases written to ${outPath}`);
