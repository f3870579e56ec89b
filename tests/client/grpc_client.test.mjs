// An independent gRPC client (@grpc/grpc-js with proto-loader reading proto/mxserve/v1) against a
// running coordinator (MXSERVE_GRPC_TARGET host:port, model MXSERVE_MODEL): what a gRPC client
// of an internal service in another language sees of mxserve.v1.Inference and grpc.health.v1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const protoDir = process.env.MXSERVE_PROTO_DIR;
const target = process.env.MXSERVE_GRPC_TARGET;
const model = process.env.MXSERVE_MODEL || 'tiny';
const load = (file) =>
  grpc.loadPackageDefinition(
    protoLoader.loadSync(join(protoDir, file), {
      includeDirs: [protoDir],
      keepCase: true,
      longs: String,
      enums: String,
      defaults: true,
      oneofs: true,
    }),
  );
const inference = new (load('mxserve/v1/inference.proto').mxserve.v1.Inference)(
  target, grpc.credentials.createInsecure());
const health = new (load('grpc/health/v1/health.proto').grpc.health.v1.Health)(
  target, grpc.credentials.createInsecure());
const deadline = () => new Date(Date.now() + 60_000);

const unary = (client, method, req) =>
  new Promise((resolve, reject) =>
    client[method](req, { deadline: deadline() }, (err, resp) => (err ? reject(err) : resolve(resp))));

// All messages of one Generate stream, or the stream's error.
const generate = (req) =>
  new Promise((resolve, reject) => {
    const out = [];
    const call = inference.Generate(req, { deadline: deadline() });
    call.on('data', (m) => out.push(m));
    call.on('error', reject);
    call.on('end', () => resolve(out));
  });

test('health reports SERVING for the inference service', async () => {
  const r = await unary(health, 'Check', { service: 'mxserve.v1.Inference' });
  assert.equal(r.status, 'SERVING');
});

test('ListModels and Tokenize', async () => {
  const models = await unary(inference, 'ListModels', {});
  assert.deepEqual(models.models.map((m) => m.id), [model]);
  assert.ok(models.models[0].max_model_len > 0);
  const t = await unary(inference, 'Tokenize', { model, text: 'hello world' });
  assert.ok(t.token_ids.length > 0);
  assert.equal(t.count, t.token_ids.length);
});

test('Generate streams deltas, then one final message with usage', async () => {
  const msgs = await generate({
    model, prompt: 'The quick brown fox', sampling: { max_tokens: 8, temperature: 0, ignore_eos: true },
  });
  const final = msgs.at(-1);
  assert.equal(final.finished, true);
  assert.equal(final.finish_reason, 'FINISH_REASON_LENGTH');
  const ids = msgs.flatMap((m) => m.token_ids);
  assert.equal(ids.length, 8);
  assert.equal(final.usage.completion_tokens, 8);
  assert.equal(final.usage.total_tokens, final.usage.prompt_tokens + 8);
  assert.ok(msgs.slice(0, -1).every((m) => !m.finished));
  // Greedy decoding is deterministic: the same request gives the same tokens.
  const again = await generate({
    model, prompt: 'The quick brown fox', sampling: { max_tokens: 8, temperature: 0, ignore_eos: true },
  });
  assert.deepEqual(again.flatMap((m) => m.token_ids), ids);
});

test('Generate with n = 3 tags every message with its sequence', async () => {
  const msgs = await generate({
    model, prompt_token_ids: { ids: [10, 20, 30] },
    sampling: { n: 3, max_tokens: 4, temperature: 0, ignore_eos: true },
  });
  for (const i of [0, 1, 2]) {
    const mine = msgs.filter((m) => m.index === i);
    const finals = mine.filter((m) => m.finished);
    assert.equal(finals.length, 1, `sequence ${i}: one final message`);
    assert.equal(mine.flatMap((m) => m.token_ids).length, 4);
  }
  assert.ok(msgs.at(-1).finished);
});

test('Generate with chat messages and tools', async () => {
  const msgs = await generate({
    model,
    messages: { messages: [{ role: 'user', content: 'What is the weather in Paris?' }] },
    tools_json: JSON.stringify([{ type: 'function', function: { name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } } } } }]),
    tool_choice: 'auto',
    reasoning_effort: 'low',
    sampling: { max_tokens: 6, temperature: 0 },
  });
  const final = msgs.at(-1);
  assert.equal(final.finished, true);
  assert.ok(['FINISH_REASON_STOP', 'FINISH_REASON_LENGTH', 'FINISH_REASON_TOOL_CALLS']
    .includes(final.finish_reason));
  assert.ok(final.usage.prompt_tokens > 0);
});

test('a named tool_choice forces a call to that function', async () => {
  const msgs = await generate({
    model,
    messages: { messages: [{ role: 'user', content: 'What time is it in Paris?' }] },
    tools_json: JSON.stringify([
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } },
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } },
    ]),
    tool_choice: 'get_time',
    sampling: { max_tokens: 8, temperature: 0 },
  });
  const pieces = msgs.flatMap((m) => m.tool_calls);
  assert.ok(pieces.length > 0, 'tool-call pieces');
  assert.ok(pieces.every((p) => p.index === 0));
  assert.equal(pieces.map((p) => p.name).join(''), 'get_time');
  assert.equal(pieces.filter((p) => p.id !== '').length, 1, 'the id on the first piece only');
  assert.match(pieces[0].id, /^call-/);
  assert.equal(msgs.map((m) => m.text).join(''), '', 'no content: the turn is the call');
  // The random model rarely writes <|call|> itself: ended by max_tokens, or as a call.
  assert.ok(['FINISH_REASON_LENGTH', 'FINISH_REASON_TOOL_CALLS'].includes(msgs.at(-1).finish_reason));
});

test('bad requests fail with INVALID_ARGUMENT naming the field', async () => {
  const cases = [
    [{ model, prompt: 'x', sampling: { temperature: -1 } }, 'sampling.temperature'],
    [{ model, prompt: 'x', sampling: { n: 0 } }, 'sampling.n'],
    [{ model, prompt: 'x', tools_json: '[]' }, 'tools_json'],
    [{ model, messages: { messages: [{ role: 'user', content: 'q' }] }, tools_json: '[{' }, 'tools_json'],
    [{ model, messages: { messages: [{ role: 'robot', content: 'q' }] } }, 'messages[0].role'],
  ];
  for (const [req, field] of cases) {
    await assert.rejects(generate(req), (err) => {
      assert.equal(err.code, grpc.status.INVALID_ARGUMENT, `${field}: ${err.message}`);
      assert.ok(err.details.includes(field), `${field} not in "${err.details}"`);
      return true;
    });
  }
  await assert.rejects(generate({ model: 'nope', prompt: 'x' }), (err) => err.code === grpc.status.NOT_FOUND);
});
