// Structured output against a coordinator serving a random-weight model (whose free text is
// garbage): every constrained output that ends by stopping parses and validates against its
// schema under Ajv, an independent validator; regex and choice outputs match; unsupported
// schema keywords get a 400 naming them. Env: MXSERVE_BASE_URL (…/v1), MXSERVE_MODEL.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Ajv from 'ajv';

const BASE = process.env.MXSERVE_BASE_URL;
const MODEL = process.env.MXSERVE_MODEL;
const SEEDS = 6;

async function post(path, body) {
  const res = await fetch(`${BASE}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, ...body }),
  });
  return { status: res.status, body: await res.json() };
}

const SCHEMAS = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string' },
      age: { type: 'integer' },
      email: { anyOf: [{ type: 'string' }, { type: 'null' }] },
      tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] } },
    },
    required: ['name', 'age', 'email', 'tags'],
    additionalProperties: false,
  },
  tree: {
    $defs: {
      node: {
        type: 'object',
        properties: {
          value: { type: 'number' },
          kind: { const: 'node' },
          children: { type: 'array', items: { $ref: '#/$defs/node' } },
        },
        required: ['value', 'kind', 'children'],
        additionalProperties: false,
      },
    },
    $ref: '#/$defs/node',
  },
  mixed: {
    type: 'object',
    properties: {
      ok: { type: 'boolean' },
      nothing: { type: 'null' },
      level: { enum: ['low', 'high', 3, null] },
      shape: {
        anyOf: [
          { type: 'object', properties: { r: { type: 'number' } }, required: ['r'],
            additionalProperties: false },
          { type: 'array', items: { type: 'integer' } },
        ],
      },
    },
    required: ['ok', 'nothing', 'level', 'shape'],
    additionalProperties: false,
  },
};

// Whitespace between JSON tokens is bounded: at most one space, and only after ':' or ','.
function boundedWhitespace(text) {
  let inString = false, escaped = false;
  for (let i = 0; i < text.length; ++i) {
    const c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c === '\\') escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    if (/\s/.test(c) && (c !== ' ' || (text[i - 1] !== ',' && text[i - 1] !== ':'))) return false;
  }
  return true;
}

function checkJson(text, validate, what) {
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `${what}: not JSON: ${text}`);
  assert.ok(validate(value), `${what}: ${JSON.stringify(validate.errors)} in ${text}`);
  assert.ok(boundedWhitespace(text), `${what}: unbounded whitespace in ${text}`);
}

for (const [name, schema] of Object.entries(SCHEMAS)) {
  test(`json_schema '${name}': every stopped output validates (chat and completions)`, async () => {
    const validate = new Ajv({ strict: false }).compile(schema);
    let stopped = 0;
    for (let seed = 0; seed < SEEDS; ++seed) {
      const chat = await post('/chat/completions', {
        messages: [{ role: 'user', content: `Give me a ${name}.` }],
        max_tokens: 1500, temperature: 1, seed,
        response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
      });
      assert.equal(chat.status, 200, JSON.stringify(chat.body));
      const c = chat.body.choices[0];
      if (c.finish_reason === 'stop') {
        ++stopped;
        checkJson(c.message.content, validate, `chat seed ${seed}`);
      }
      const cmpl = await post('/completions', {
        prompt: `A ${name} in JSON:`, max_tokens: 1500, temperature: seed % 2 ? 0.7 : 0, seed,
        guided_json: schema,
      });
      assert.equal(cmpl.status, 200, JSON.stringify(cmpl.body));
      const k = cmpl.body.choices[0];
      if (k.finish_reason === 'stop') {
        ++stopped;
        checkJson(k.text, validate, `completion seed ${seed}`);
      }
    }
    assert.ok(stopped >= SEEDS, `only ${stopped} of ${2 * SEEDS} outputs finished`);
  });
}

test('json_object: every stopped output is a JSON object', async () => {
  for (let seed = 0; seed < SEEDS; ++seed) {
    const r = await post('/chat/completions', {
      messages: [{ role: 'user', content: 'json please' }], max_tokens: 1500, temperature: 1, seed,
      response_format: { type: 'json_object' },
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const c = r.body.choices[0];
    if (c.finish_reason !== 'stop') continue;
    const v = JSON.parse(c.message.content);
    assert.equal(typeof v, 'object');
    assert.ok(v !== null && !Array.isArray(v), c.message.content);
  }
});

test('streamed structured output concatenates to a valid document', async () => {
  const validate = new Ajv({ strict: false }).compile(SCHEMAS.person);
  const res = await fetch(`${BASE}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: MODEL, stream: true, max_tokens: 1500, temperature: 0.8, seed: 11,
      messages: [{ role: 'user', content: 'person' }],
      response_format: { type: 'json_schema', json_schema: { name: 'p', schema: SCHEMAS.person } },
    }),
  });
  assert.equal(res.status, 200);
  let text = '', finish = null;
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const chunk = JSON.parse(line.slice(6));
    for (const ch of chunk.choices ?? []) {
      text += ch.delta?.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
  }
  if (finish === 'stop') checkJson(text, validate, 'stream');
});

test('guided_regex and guided_choice outputs match', async () => {
  for (let seed = 0; seed < SEEDS; ++seed) {
    const rx = await post('/completions', {
      prompt: 'code:', max_tokens: 200, temperature: 1, seed,
      guided_regex: '[A-Z]{2}-\\d{3,5}(x|yz)?',
    });
    assert.equal(rx.status, 200, JSON.stringify(rx.body));
    if (rx.body.choices[0].finish_reason === 'stop') {
      assert.match(rx.body.choices[0].text, /^[A-Z]{2}-\d{3,5}(x|yz)?$/);
    }
    const ch = await post('/chat/completions', {
      messages: [{ role: 'user', content: 'pick' }], max_tokens: 50, temperature: 1, seed,
      structured_outputs: { choice: ['red', 'green', 'blue sky'] },
    });
    assert.equal(ch.status, 200, JSON.stringify(ch.body));
    assert.equal(ch.body.choices[0].finish_reason, 'stop');
    assert.ok(['red', 'green', 'blue sky'].includes(ch.body.choices[0].message.content),
              ch.body.choices[0].message.content);
  }
});

test('an unsupported schema keyword is a 400 naming it', async () => {
  const r = await post('/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    response_format: {
      type: 'json_schema',
      json_schema: { name: 'x', schema: { type: 'object', properties: { s: { type: 'string', pattern: '^a' } } } },
    },
  });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.type, 'invalid_request_error');
  assert.equal(r.body.error.param, 'response_format.json_schema.schema');
  assert.match(r.body.error.message, /'pattern'/);
  const rx = await post('/completions', { prompt: 'x', guided_regex: '(?=a)a' });
  assert.equal(rx.status, 400);
  assert.match(rx.body.error.message, /lookaround/);
});
