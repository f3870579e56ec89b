#!/usr/bin/env python3
"""Renders OpenAI-style conversations with gpt-oss's HF chat_template.jinja the way transformers
does (jinja2 sandbox, trim_blocks + lstrip_blocks, json.dumps-based tojson, strftime_now), and
writes tests/tokenizer/data/harmony_render_fixtures.json for chat_template_test.

Usage: make_harmony_fixtures.py CHAT_TEMPLATE_JINJA OUT_JSON
The template is openai/gpt-oss-20b's chat_template.jinja (not kept in this repository). Messages
are stored as an OpenAI client sends them (tool-call arguments as a JSON string, reasoning under
"reasoning"); like vLLM, they are turned into the template's form (arguments as an object,
reasoning as "thinking") before rendering.
"""
import copy
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATE = datetime.datetime(2025, 6, 28)


def render(template, messages, tools, add_generation_prompt, reasoning_effort):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: DATE.strftime(fmt)
    kwargs = {"messages": messages, "add_generation_prompt": add_generation_prompt}
    if tools:
        kwargs["tools"] = tools
    if reasoning_effort is not None:
        kwargs["reasoning_effort"] = reasoning_effort
    return env.from_string(template).render(**kwargs)


def to_template_form(messages):
    out = []
    for m in copy.deepcopy(messages):
        if "reasoning" in m:
            m["thinking"] = m.pop("reasoning")
        for call in m.get("tool_calls", []):
            args = call["function"].get("arguments")
            if isinstance(args, str):
                call["function"]["arguments"] = json.loads(args)
        out.append(m)
    return out


def call(name, args, id_="call_1"):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, separators=(",", ":"))}}


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "description": "Days ahead", "default": 1},
        "hourly": {"type": "boolean"},
        "note": {"type": "string", "nullable": True},
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "number"}, "nullable": True},
        "anything": {}},
        "required": ["location"]}}}
NOW = {"type": "function", "function": {"name": "now", "description": "Current time.",
                                        "parameters": {"type": "object", "properties": {}}}}
PING = {"type": "function", "function": {"name": "ping", "description": "Ping."}}
NESTED = {"type": "function", "function": {
    "name": "book", "description": "Book a trip.",
    "parameters": {"type": "object", "properties": {
        "traveler": {"type": "object", "description": "Who travels",
                     "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                     "required": ["name"]},
        "legs": {"type": "array", "items": {"type": "object", "properties": {
            "from": {"type": "string"}, "to": {"type": "string"}}}},
        "mode": {"type": ["string", "null"]},
        "opts": {"type": "object"}},
        "required": ["traveler", "legs"]}}}

CASES = [
    ("user_only", [{"role": "user", "content": "What is 2 + 2?"}], None, True, None),
    ("system_low", [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Hi"}], None, True, "low"),
    ("developer_multiturn", [{"role": "developer", "content": "Answer in French.\n\nBe kind."},
                             {"role": "user", "content": "Hello"},
                             {"role": "assistant", "content": "Bonjour !"},
                             {"role": "user", "content": "Thanks"}], None, True, "high"),
    ("training_tail", [{"role": "user", "content": "2+2?"},
                       {"role": "assistant", "content": "4", "reasoning": "Simple sum."}],
     None, False, None),
    ("empty_system", [{"role": "system", "content": ""}, {"role": "user", "content": "x"}],
     None, True, None),
    ("unicode", [{"role": "user", "content": "你好 😀 \"quotes\" \\ back\nnew\tline <b>"}], None,
     True, None),
    ("tools_declared", [{"role": "system", "content": "Use tools."},
                        {"role": "user", "content": "Weather in Paris?"}],
     [WEATHER, NOW, PING], True, None),
    ("tools_nested", [{"role": "user", "content": "Book it"}], [NESTED], True, "medium"),
    ("tool_call_pending", [{"role": "user", "content": "Weather in Paris?"},
                           {"role": "assistant", "content": "", "reasoning": "Need weather.",
                            "tool_calls": [call("get_weather", {"location": "Paris", "days": 2})]},
                           {"role": "tool", "tool_call_id": "call_1",
                            "content": "{\"temp\": 20, \"sky\": \"clear\\n\"}"}],
     [WEATHER], True, None),
    ("tool_call_answered", [{"role": "user", "content": "Weather in Paris?"},
                            {"role": "assistant", "content": "", "reasoning": "Need weather.",
                             "tool_calls": [call("get_weather", {"location": "Paris"})]},
                            {"role": "tool", "tool_call_id": "call_1", "content": "20C"},
                            {"role": "assistant", "content": "It is 20C."},
                            {"role": "user", "content": "And tomorrow?"}],
     [WEATHER], True, None),
    ("tool_call_content_as_analysis", [{"role": "user", "content": "Time?"},
                                       {"role": "assistant", "content": "Checking the clock.",
                                        "tool_calls": [call("now", {})]},
                                       {"role": "tool", "tool_call_id": "call_1",
                                        "content": "12:00"}],
     [NOW], True, None),
    ("two_calls", [{"role": "user", "content": "Paris then Rome"},
                   {"role": "assistant", "content": "",
                    "tool_calls": [call("get_weather", {"location": "Paris"})]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "20"},
                   {"role": "assistant", "content": "",
                    "tool_calls": [call("get_weather", {"location": "Rome", "unit": "celsius"},
                                        "call_2")]},
                   {"role": "tool", "tool_call_id": "call_2", "content": "25"}],
     [WEATHER], True, "low"),
]


def main():
    template = open(sys.argv[1], encoding="utf-8").read()
    fixtures = []
    for name, messages, tools, gen, effort in CASES:
        text = render(template, to_template_form(messages), tools, gen, effort)
        fixtures.append({"name": name, "messages": messages, "tools": tools,
                         "add_generation_prompt": gen,
                         "reasoning_effort": effort or "medium",
                         "current_date": DATE.strftime("%Y-%m-%d"), "rendered": text})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"source": "openai/gpt-oss-20b chat_template.jinja rendered by "
                             "tests/tokenizer/golden/make_harmony_fixtures.py (jinja2 " +
                             jinja2.__version__ + ", transformers' environment)",
                   "fixtures": fixtures}, f, ensure_ascii=False, indent=1)
    print(f"{len(fixtures)} fixtures written to {sys.argv[2]}")


if __name__ == "__main__":
    main()
