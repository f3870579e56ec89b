// The official openai npm SDK's Responses API (responses.create / responses.stream) against a
// running coordinator (MXSERVE_BASE_URL, model MXSERVE_MODEL; gpt-oss's harmony format).
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

const weatherTool = {
  type: 'function',
  name: 'get_weather',
  description: 'Current weather in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
  },
};

// What an output item says, without its random ids.
function shape(item) {
  switch (item.type) {
    case 'message':
      return { type: item.type, text: item.content.map((c) => c.text).join('') };
    case 'reasoning':
      return { type: item.type, text: item.content.map((c) => c.text).join('') };
    case 'function_call':
      return { type: item.type, name: item.name, arguments: item.arguments };
    default:
      throw new Error(`unexpected output item type ${item.type}`);
  }
}

function checkResponse(r, maxOutput) {
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.model, model);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens <= maxOutput);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  for (const item of r.output) shape(item);
  // The SDK's own convenience field (responses.create only): the text of every message item.
  if (r.output_text !== undefined) assert.equal(r.output_text, messageText(r));
}

function messageText(r) {
  return r.output
    .filter((o) => o.type === 'message')
    .flatMap((o) => o.content.map((c) => c.text))
    .join('');
}

test('responses.create with a string input', async () => {
  const r = await client.responses.create({
    model,
    instructions: 'Be brief.',
    input: 'Hello!',
    max_output_tokens: 12,
    temperature: 0,
  });
  checkResponse(r, 12);
  assert.equal(r.instructions, 'Be brief.');
  assert.equal(r.max_output_tokens, 12);
});

test('responses.create with input items, tools and reasoning effort', async () => {
  const r = await client.responses.create({
    model,
    input: [
      { role: 'developer', content: 'Answer with the tool result.' },
      { role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] },
      {
        type: 'reasoning',
        id: 'rs_1',
        summary: [],
        content: [{ type: 'reasoning_text', text: 'I should call get_weather.' }],
      },
      {
        type: 'function_call',
        call_id: 'call_1',
        name: 'get_weather',
        arguments: '{"city":"Paris"}',
      },
      { type: 'function_call_output', call_id: 'call_1', output: '{"temp_c":21}' },
    ],
    tools: [weatherTool],
    reasoning: { effort: 'low' },
    max_output_tokens: 10,
    temperature: 0,
  });
  checkResponse(r, 10);
  assert.deepEqual(r.reasoning, { effort: 'low' });
  assert.equal(r.tools[0].name, 'get_weather');
});

test('a named tool_choice yields a function_call item', async () => {
  const r = await client.responses.create({
    model,
    input: 'Weather in Oslo?',
    tools: [weatherTool],
    tool_choice: { type: 'function', name: 'get_weather' },
    max_output_tokens: 8,
    temperature: 0,
  });
  checkResponse(r, 8);
  assert.equal(r.output[0].type, 'function_call');
  assert.equal(r.output[0].name, 'get_weather');
  assert.match(r.output[0].call_id, /^call_/);
});

test('responses.stream: events in order, final response equals responses.create', async () => {
  const params = {
    model,
    input: 'Count to five.',
    max_output_tokens: 16,
    temperature: 0,
  };
  const whole = await client.responses.create(params);
  const stream = client.responses.stream(params);
  const events = [];
  let text = '';
  stream.on('response.output_text.delta', (e) => {
    text += e.delta;
    assert.equal(e.snapshot.endsWith(e.delta), true);
  });
  for await (const e of stream) events.push(e);
  const final = await stream.finalResponse();

  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[1].type, 'response.in_progress');
  assert.equal(events.at(-1).type, 'response.completed');
  const added = events.filter((e) => e.type === 'response.output_item.added');
  const done = events.filter((e) => e.type === 'response.output_item.done');
  assert.equal(added.length, final.output.length);
  assert.equal(done.length, final.output.length);
  // (The SDK adds its own 'parsed' field to the final response's text parts.)
  assert.deepEqual(done.map((e) => e.item.id), final.output.map((o) => o.id));
  assert.deepEqual(done.map((e) => shape(e.item)), final.output.map(shape));
  assert.equal(text, messageText(final));
  checkResponse(final, 16);
  assert.deepEqual(final.output.map(shape), whole.output.map(shape));
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
});

test('responses.stream of a forced function call streams its arguments', async () => {
  const stream = client.responses.stream({
    model,
    input: 'Weather in Rome?',
    tools: [weatherTool],
    tool_choice: { type: 'function', name: 'get_weather' },
    max_output_tokens: 8,
    temperature: 0,
  });
  let args = '';
  let argsDone = null;
  stream.on('response.function_call_arguments.delta', (e) => {
    args += e.delta;
  });
  stream.on('response.function_call_arguments.done', (e) => {
    argsDone = e.arguments;
  });
  const final = await stream.finalResponse();
  assert.equal(final.output[0].type, 'function_call');
  assert.equal(final.output[0].name, 'get_weather');
  assert.equal(final.output[0].arguments, args);
  assert.equal(argsDone, args);
});

test('refused fields come back as a 400 naming them', async () => {
  await assert.rejects(
    client.responses.create({ model, input: 'Hi', frobnicate: true }),
    (err) => err.status === 400 && err.param === 'frobnicate',
  );
  await assert.rejects(
    client.responses.create({ model, input: 'Hi', tools: [{ type: 'web_search_preview' }] }),
    (err) => err.status === 400 && err.param === 'tools[0].type',
  );
  // As vLLM without a response store: no earlier response can be found.
  await assert.rejects(
    client.responses.create({ model, input: 'Hi', previous_response_id: 'resp_123' }),
    (err) => err.status === 404 && err.param === 'previous_response_id',
  );
});
