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
