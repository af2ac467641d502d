// The official client libraries against `dsv41 serve` on the tiny model (started by
// run_sdk_test.sh): npm `openai` and `@anthropic-ai/sdk`, pinned there. Expected values are the
// APIs' documented shapes and the non-streaming response itself (streamed deltas must add up to
// it at temperature 0).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');

const baseURL = process.env.DSV41_BASE_URL;
const apiKey = process.env.DSV41_API_KEY;
const model = 'tiny';
const openai = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
const messages = [{ role: 'user', content: 'Say something about the sea.' }];

test('models.list names the served model and its context', async () => {
  const page = await openai.models.list();
  const ids = page.data.map((m) => m.id);
  assert.deepEqual(ids, ['tiny']);
  assert.equal(page.data[0].object, 'model');
  assert.equal(page.data[0].max_model_len, 131072);  // the tiny preset's context
});

test('chat completion: streamed deltas concatenate to the non-streamed message', async () => {
  const request = { model, messages, temperature: 0, max_tokens: 12 };
  const full = await openai.chat.completions.create(request);
  assert.equal(full.object, 'chat.completion');
  const message = full.choices[0].message;
  assert.equal(message.role, 'assistant');
  assert.equal(typeof message.reasoning_content, 'string');  // thinking mode by default
  assert.ok(['stop', 'length'].includes(full.choices[0].finish_reason));
  const u = full.usage;
  assert.ok(u.prompt_tokens > 5);
  assert.ok(u.completion_tokens >= 1 && u.completion_tokens <= 12);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(typeof u.prompt_tokens_details.cached_tokens, 'number');
  assert.equal(typeof u.completion_tokens_details.reasoning_tokens, 'number');
  assert.ok(u.completion_tokens_details.reasoning_tokens <= u.completion_tokens);

  const stream = await openai.chat.completions.create({
    ...request, stream: true, stream_options: { include_usage: true },
  });
  let content = '';
  let reasoning = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    const delta = chunk.choices[0].delta;
    if (delta.content) content += delta.content;
    if (delta.reasoning_content) reasoning += delta.reasoning_content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(chunks >= 3);
  assert.equal(content, message.content ?? '');
  assert.equal(reasoning, message.reasoning_content);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.equal(usage.prompt_tokens, u.prompt_tokens);
  assert.equal(usage.completion_tokens, u.completion_tokens);
  assert.equal(usage.completion_tokens_details.reasoning_tokens,
               u.completion_tokens_details.reasoning_tokens);
});

test('chat completion in chat mode puts the text in content', async () => {
  const full = await openai.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 8, chat_template_kwargs: { thinking: false },
  });
  assert.equal(full.choices[0].message.reasoning_content, null);
  assert.equal(full.usage.completion_tokens_details.reasoning_tokens, 0);
});

test('completions with token-id prompts and return_token_ids', async () => {
  const prompt = [10, 20, 30, 40, 50];
  const out = await openai.completions.create({
    model, prompt, max_tokens: 6, temperature: 0, ignore_eos: true, return_token_ids: true,
  });
  assert.equal(out.object, 'text_completion');
  const choice = out.choices[0];
  assert.deepEqual(choice.prompt_token_ids, prompt);
  assert.equal(choice.token_ids.length, 6);
  assert.equal(choice.finish_reason, 'length');
  assert.equal(out.usage.prompt_tokens, 5);
  assert.equal(out.usage.completion_tokens, 6);
  assert.equal(out.usage.total_tokens, 11);
  // Streaming: the same ids and text, piece by piece.
  const stream = await openai.completions.create({
    model, prompt, max_tokens: 6, temperature: 0, ignore_eos: true, return_token_ids: true,
    stream: true,
  });
  let text = '';
  const ids = [];
  let promptIds = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    text += c.text;
    if (c.token_ids) ids.push(...c.token_ids);
    if (c.prompt_token_ids) promptIds = c.prompt_token_ids;
  }
  assert.equal(text, choice.text);
  assert.deepEqual(ids, choice.token_ids);
  assert.deepEqual(promptIds, prompt);
});

test('anthropic messages: the stream accumulates to the non-streamed message', async () => {
  const request = { model, max_tokens: 12, temperature: 0, messages, system: 'Be brief.' };
  const full = await anthropic.messages.create(request);
  assert.equal(full.type, 'message');
  assert.equal(full.role, 'assistant');
  assert.ok(full.id.startsWith('msg_'));
  assert.equal(full.content[0].type, 'thinking');
  assert.ok(['end_turn', 'max_tokens'].includes(full.stop_reason));
  assert.ok(full.usage.input_tokens > 0);
  assert.ok(full.usage.output_tokens >= 1 && full.usage.output_tokens <= 12);

  const stream = anthropic.messages.stream(request);
  const events = [];
  stream.on('streamEvent', (e) => events.push(e.type));
  const streamed = await stream.finalMessage();
  assert.equal(events[0], 'message_start');
  assert.equal(events[events.length - 1], 'message_stop');
  assert.deepEqual(streamed.content.map((b) => b.type), full.content.map((b) => b.type));
  for (let i = 0; i < full.content.length; ++i) {
    assert.equal(streamed.content[i].thinking, full.content[i].thinking);
    assert.equal(streamed.content[i].text, full.content[i].text);
  }
  assert.equal(streamed.stop_reason, full.stop_reason);
  assert.equal(streamed.usage.output_tokens, full.usage.output_tokens);
});

test('anthropic as Claude Code calls it: count_tokens, system turns, thinking, effort', async () => {
  const conversation = [
    { role: 'user', content: 'Read the file.' },
    { role: 'assistant', content: 'Which one?' },
    { role: 'system', content: 'The user works in /tmp.' },
    { role: 'user', content: [{ type: 'text', text: 'notes.txt', cache_control: { type: 'ephemeral' } }] },
  ];
  const request = {
    model, max_tokens: 8, temperature: 0, messages: conversation,
    system: [{ type: 'text', text: 'You are a coding agent. '.repeat(60), cache_control: { type: 'ephemeral' } }],
    thinking: { type: 'adaptive' }, output_config: { effort: 'high' },
    metadata: { user_id: 'someone' }, context_management: { edits: [] },
  };
  const counted = await anthropic.messages.countTokens({
    model, messages: conversation, system: request.system, thinking: request.thinking,
    output_config: request.output_config,
  });
  assert.ok(counted.input_tokens > 256);  // two full 128-token blocks at least
  const full = await anthropic.messages.create(request);
  assert.equal(full.usage.input_tokens + full.usage.cache_read_input_tokens, counted.input_tokens);
  assert.equal(full.content[0].type, 'thinking');
  const streamed = await anthropic.messages.stream(request).finalMessage();
  assert.deepEqual(streamed.content, full.content);
  assert.equal(streamed.usage.output_tokens, full.usage.output_tokens);
  // The same conversation again: the prefix cache serves the prompt's full blocks.
  const again = await anthropic.messages.create(request);
  assert.ok(again.usage.cache_read_input_tokens > 0, JSON.stringify(again.usage));
  await assert.rejects(
    anthropic.messages.countTokens({ model, messages: [] }),
    (e) => e instanceof Anthropic.BadRequestError && /messages/.test(e.message));
});

test('responses.create and responses.stream agree; stored responses read back and continue', async () => {
  // Instructions long enough to fill whole cache blocks, which the continuation then reuses.
  const request = { model, instructions: 'Be brief. '.repeat(60), input: 'Say something about the sea.',
                    temperature: 0, max_output_tokens: 12, reasoning: { effort: 'high' } };
  const full = await openai.responses.create(request);
  assert.equal(full.object, 'response');
  assert.ok(['completed', 'incomplete'].includes(full.status));
  assert.equal(typeof full.output_text, 'string');
  const u = full.usage;
  assert.ok(u.input_tokens > 5);
  assert.ok(u.output_tokens >= 1 && u.output_tokens <= 12);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.equal(typeof u.input_tokens_details.cached_tokens, 'number');
  assert.equal(typeof u.output_tokens_details.reasoning_tokens, 'number');

  const stream = openai.responses.stream(request);
  const types = [];
  let text = '';
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') text += event.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.ok(types.at(-1) === 'response.completed' || types.at(-1) === 'response.incomplete');
  const strip = (r) => r.output.map((item) => ({ ...item, id: '-' }));
  assert.deepEqual(strip(final), strip(full));
  assert.equal(text, full.output_text);
  assert.equal(final.output_text, full.output_text);

  const stored = await openai.responses.retrieve(full.id);
  assert.deepEqual(strip(stored), strip(full));
  // Instructions are not carried over (the API's rule): the client sends them again.
  const next = await openai.responses.create({ model, previous_response_id: full.id,
                                               instructions: request.instructions,
                                               input: 'And about the sky?', max_output_tokens: 4 });
  assert.ok(next.usage.input_tokens > u.input_tokens);
  assert.ok(next.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(next.usage));
  await openai.responses.delete(full.id);
  await assert.rejects(openai.responses.retrieve(full.id),
                       (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(
    openai.responses.create({ model, input: 'x', tools: [{ type: 'custom', name: 'apply_patch' }] }),
    (e) => e instanceof OpenAI.BadRequestError && /tools\[0\]\.type/.test(e.message));
});

test('errors surface as the SDKs typed errors: 400, 401, 404', async () => {
  await assert.rejects(
    openai.chat.completions.create({ model, messages: [{ role: 'wizard', content: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
           /messages\[0\]\.role/.test(e.message));
  await assert.rejects(
    openai.chat.completions.create({ model, messages, n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && /\bn\b/.test(e.message));
  const wrongKey = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(),
                       (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(
    openai.chat.completions.create({ model: 'no-such-model', messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(
    anthropic.messages.create({ model, max_tokens: 5, messages: [{ role: 'robot', content: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 &&
           e.error.type === 'error' && e.error.error.type === 'invalid_request_error');
  const wrongAnthropic = new Anthropic({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrongAnthropic.messages.create({ model, max_tokens: 5, messages }),
                       (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
  await assert.rejects(anthropic.messages.create({ model: 'nope', max_tokens: 5, messages }),
                       (e) => e instanceof Anthropic.NotFoundError && e.status === 404);
});

test('a full server answers 429 (OpenAI) and 529 (Anthropic) at once', async () => {
  // The server runs with --max-num-seqs 2 --max-queue 0: two long streams fill it.
  const long = { model, messages, max_tokens: 900, ignore_eos: true, stream: true };
  const streams = [await openai.chat.completions.create(long),
                   await openai.chat.completions.create(long)];
  const iterators = streams.map((s) => s[Symbol.asyncIterator]());
  for (const it of iterators) await it.next();  // both are running
  await assert.rejects(openai.chat.completions.create({ model, messages, max_tokens: 2 }),
                       (e) => e instanceof OpenAI.RateLimitError && e.status === 429);
  await assert.rejects(anthropic.messages.create({ model, max_tokens: 2, messages }),
                       (e) => e instanceof Anthropic.APIError && e.status === 529 &&
                              e.error.error.type === 'overloaded_error');
  // Hanging up aborts both; the server frees them and serves again.
  for (const s of streams) s.controller.abort();
  let served = false;
  for (let i = 0; i < 200 && !served; ++i) {
    try {
      await openai.chat.completions.create({ model, messages, max_tokens: 2 });
      served = true;
    } catch (e) {
      if (!(e instanceof OpenAI.RateLimitError)) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  assert.ok(served);
});

// Issue 21: images through the official clients (vision.md §3). The tiny preset's tower plans the
// golden grad_100x60.png (goldens/vision, c1_grad) to a span of 34 positions.
const fs = require('node:fs');
const imageBase64 = fs.readFileSync(process.env.DSV41_TEST_IMAGE).toString('base64');
const imageUrl = `data:image/png;base64,${imageBase64}`;
const kSpanLength = 34;

// Under mpirun (DSV41_EXPECT_IMAGES=0) the deployment is text-only: the model says so and an
// image is a 400 (docs/multinode.md).
const imagesServed = process.env.DSV41_EXPECT_IMAGES !== '0';

test('images: a text-only deployment says so and refuses an image with a 400',
     { skip: imagesServed }, async () => {
  const page = await openai.models.list();
  assert.equal(page.data[0].vision, false);
  await assert.rejects(
    openai.chat.completions.create({
      model, max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: imageUrl } }] }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && /not supported/.test(e.message));
  const ok = await openai.chat.completions.create({ model, messages, max_tokens: 2 });
  assert.equal(ok.object, 'chat.completion');
});

test('images: chat image_url, Anthropic image blocks and Responses input_image agree',
     { skip: !imagesServed }, async () => {
  const page = await openai.models.list();
  assert.equal(page.data[0].vision, true);
  assert.deepEqual(page.data[0].input_modalities, ['text', 'image']);

  const part = { type: 'image_url', image_url: { url: imageUrl } };
  const one = await openai.chat.completions.create({
    model, temperature: 0, max_tokens: 4,
    messages: [{ role: 'user', content: [part, { type: 'text', text: 'describe' }] }],
  });
  assert.equal(one.object, 'chat.completion');
  assert.ok(one.usage.completion_tokens >= 1);
  // A second image adds its span and the "\n\n" joining it to the next block.
  const two = await openai.chat.completions.create({
    model, temperature: 0, max_tokens: 4,
    messages: [{ role: 'user', content: [part, part, { type: 'text', text: 'describe' }] }],
  });
  const separator = await fetch(`${baseURL}/tokenize`, {
    method: 'POST', headers: { Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ prompt: '\n\n', add_special_tokens: false }),
  }).then((r) => r.json());
  assert.equal(two.usage.prompt_tokens - one.usage.prompt_tokens, kSpanLength + separator.count);

  const message = await anthropic.messages.create({
    model, max_tokens: 4,
    messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: imageBase64 } },
      { type: 'text', text: 'describe' }] }],
  });
  assert.equal(message.type, 'message');
  assert.equal(message.usage.input_tokens + message.usage.cache_read_input_tokens,
               one.usage.prompt_tokens);

  const response = await openai.responses.create({
    model, max_output_tokens: 4,
    input: [{ role: 'user', content: [
      { type: 'input_image', image_url: imageUrl }, { type: 'input_text', text: 'describe' }] }],
  });
  assert.equal(response.object, 'response');
  assert.equal(response.usage.input_tokens, one.usage.prompt_tokens);
});

test('images: a bad image is a typed 400 naming the part, and the server serves on',
     { skip: !imagesServed }, async () => {
  const bad = `data:image/png;base64,${imageBase64.slice(0, imageBase64.length / 2)}`;
  await assert.rejects(
    openai.chat.completions.create({
      model, max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: bad } }] }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
      /messages\[0\]\.content\[0\]: PNG: truncated data/.test(e.message));
  await assert.rejects(
    anthropic.messages.create({
      model, max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'image', source: {
        type: 'base64', media_type: 'image/gif', data: Buffer.from('GIF89a').toString('base64') } }] }],
    }),
    (e) => e instanceof Anthropic.BadRequestError && /GIF images are not supported/.test(e.message));
  await assert.rejects(
    openai.chat.completions.create({
      model, max_tokens: 2,
      messages: [{ role: 'user', content: [
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && /not fetched/.test(e.message));
  const ok = await openai.chat.completions.create({ model, messages, max_tokens: 2 });
  assert.equal(ok.object, 'chat.completion');
});
