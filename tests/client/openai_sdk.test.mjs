// The official openai npm SDK against a running coordinator (MXSERVE_BASE_URL, model MXSERVE_MODEL).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: process.env.MXSERVE_BASE_URL,
  apiKey: process.env.MXSERVE_API_KEY || 'unused',
  maxRetries: 0,
  timeout: 60_000,
});
const model = process.env.MXSERVE_MODEL || 'tiny';

test('models.list names the served model', async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), [model]);
});

test('chat completion (non-streaming)', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_tokens: 12,
    temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat completion streaming equals non-streaming at temperature 0', async () => {
  const params = {
    model,
    messages: [{ role: 'user', content: 'Count to five.' }],
    max_tokens: 16,
    temperature: 0,
  };
  const whole = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({
    ...params,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2);
  assert.equal(text, whole.choices[0].message.content ?? '');
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.ok(usage && usage.completion_tokens === whole.usage.completion_tokens);
});

test('completions with logprobs and echo', async () => {
  const r = await client.completions.create({
    model,
    prompt: 'The quick brown fox',
    max_tokens: 5,
    temperature: 0,
    logprobs: 3,
    echo: true,
  });
  assert.equal(r.object, 'text_completion');
  const c = r.choices[0];
  assert.ok(c.text.startsWith('The quick brown fox'));
  assert.equal(c.logprobs.tokens.length, c.logprobs.token_logprobs.length);
  assert.equal(c.logprobs.token_logprobs[0], null);
  for (const lp of c.logprobs.token_logprobs.slice(1)) assert.ok(lp <= 0);
  assert.equal(r.usage.completion_tokens, 5);
});

test('completions streaming', async () => {
  const stream = await client.completions.create({
    model, prompt: [1, 2, 3, 4], max_tokens: 6, temperature: 0, stream: true,
  });
  let n = 0;
  let finish = null;
  for await (const chunk of stream) {
    n++;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(n >= 1);
  assert.equal(finish, 'length');
});

test('bad request surfaces as a 400 APIError with a param', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [], max_tokens: 4 }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && /messages/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.APIError && e.status === 404,
  );
});

// ---- tools, n, seed, chat logprobs (issue 3) ----

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
    },
  },
};
const timeTool = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: {} } },
};
const askWeather = [{ role: 'user', content: 'Weather in Paris?' }];

test('tools are accepted with tool_choice auto and none', async () => {
  for (const tool_choice of ['auto', 'none', undefined]) {
    const r = await client.chat.completions.create({
      model, messages: askWeather, tools: [weatherTool, timeTool], tool_choice,
      max_tokens: 8, temperature: 0,
    });
    assert.equal(r.choices.length, 1);
    assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  }
});

// A stop string that first occurs at index >= 1 of `text` (else at 0): a request with it ends
// by "stop", deterministically at temperature 0, inside the forced call.
function stopInside(text) {
  for (let k = 1; k < text.length; k++) if (text.indexOf(text[k]) === k) return text[k];
  return text.length ? text[0] : null;
}

test('named tool_choice forces a call to that function', async () => {
  const params = {
    model, messages: askWeather, tools: [weatherTool, timeTool], temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 8,
  };
  const r = await client.chat.completions.create(params);
  const m = r.choices[0].message;
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.equal(m.tool_calls[0].function.name, 'get_time');
  assert.equal(typeof m.tool_calls[0].function.arguments, 'string');
  assert.match(m.tool_calls[0].id, /^call-/);
  assert.equal(m.content, null);
  // The random model rarely writes <|call|> itself; ended by a stop string, the turn is a call.
  assert.ok(['tool_calls', 'length'].includes(r.choices[0].finish_reason));
  const stop = stopInside(m.tool_calls[0].function.arguments);
  if (stop !== null) {
    const s = await client.chat.completions.create({ ...params, stop: [stop] });
    assert.equal(s.choices[0].finish_reason, 'tool_calls');
    assert.equal(s.choices[0].message.tool_calls[0].function.name, 'get_time');
    assert.equal(typeof s.choices[0].message.tool_calls[0].function.arguments, 'string');
  }
});

test('named tool_choice, streamed', async () => {
  const params = {
    model, messages: askWeather, tools: [weatherTool, timeTool], temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 8,
  };
  const whole = await client.chat.completions.create(params);
  const stop = stopInside(whole.choices[0].message.tool_calls[0].function.arguments);
  const stream = await client.chat.completions.create({
    ...params, stream: true, ...(stop !== null ? { stop: [stop] } : {}),
  });
  const calls = {};
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const t of c.delta?.tool_calls ?? []) {
        calls[t.index] ??= { id: null, name: '', arguments: '' };
        if (t.id) calls[t.index].id = t.id;
        if (t.function?.name) calls[t.index].name += t.function.name;
        if (t.function?.arguments) calls[t.index].arguments += t.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.deepEqual(Object.keys(calls), ['0']);
  assert.equal(calls[0].name, 'get_weather');
  assert.match(calls[0].id, /^call-/);
  assert.equal(typeof calls[0].arguments, 'string');
  assert.equal(finish, stop !== null ? 'tool_calls' : whole.choices[0].finish_reason);
});

test('tool_choice required with one tool calls it; unknown names are rejected', async () => {
  const r = await client.chat.completions.create({
    model, messages: askWeather, tools: [weatherTool], tool_choice: 'required',
    max_tokens: 6, temperature: 0,
  });
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
  // Several tools: the model picks the name (accepted; a random model may not finish it).
  const many = await client.chat.completions.create({
    model, messages: askWeather, tools: [weatherTool, timeTool], tool_choice: 'required',
    max_tokens: 6, temperature: 0,
  });
  assert.equal(many.choices.length, 1);
  await assert.rejects(
    client.chat.completions.create({
      model, messages: askWeather, tools: [weatherTool],
      tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === 'tool_choice',
  );
});

test('tool results in the conversation are accepted', async () => {
  const r = await client.chat.completions.create({
    model,
    tools: [weatherTool],
    messages: [
      ...askWeather,
      {
        role: 'assistant', content: null,
        tool_calls: [{ id: 'call_1', type: 'function',
          function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
    ],
    max_tokens: 6,
    temperature: 0,
  });
  assert.equal(r.choices.length, 1);
  assert.ok(r.usage.prompt_tokens > 20);
});

test('n choices, whole and streamed', async () => {
  const r = await client.chat.completions.create({
    model, messages: askWeather, n: 3, max_tokens: 5, temperature: 0,
  });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  // Greedy: every choice is the same.
  for (const c of r.choices) assert.equal(c.message.content, r.choices[0].message.content);
  const one = await client.chat.completions.create({
    model, messages: askWeather, max_tokens: 5, temperature: 0,
  });
  assert.equal(r.usage.completion_tokens, 3 * one.usage.completion_tokens);  // summed
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);

  const stream = await client.completions.create({
    model, prompt: [5, 6, 7], n: 2, max_tokens: 4, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  const text = ['', ''];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text[c.index] += c.text;
  }
  assert.equal(text[0], text[1]);
  assert.equal(usage.completion_tokens, 8);
});

test('a seed makes sampled output reproducible; n choices get different seeds', async () => {
  const params = {
    model, prompt: [10, 11, 12, 13], max_tokens: 12, temperature: 1.0, seed: 1234,
  };
  const a = await client.completions.create(params);
  const b = await client.completions.create(params);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const c = await client.completions.create({ ...params, n: 2 });
  assert.equal(c.choices[0].text, a.choices[0].text);  // choice 0 uses the seed itself
  const d = await client.completions.create({ ...params, seed: 1235 });
  assert.equal(c.choices[1].text, d.choices[0].text);  // choice i uses seed + i
});

test('chat logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model, messages: askWeather, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
  }
});
