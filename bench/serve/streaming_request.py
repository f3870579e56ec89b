"""One streamed OpenAI request (/v1/completions or /v1/chat/completions) and its timings.

An output chunk is an SSE event whose first choice carries generated output: text (completions),
or delta content, reasoning or tool calls (chat). Chunks that carry only a role, only a
finish_reason, or only usage are not output: some servers send the finish_reason in a chunk of
its own, which would add a gap of about zero to ITL. (vLLM's client counts every chunk that has
choices; a server that sends no output chunk at all is timed on those, as vLLM does.)
"""

import asyncio
import json
import time

from metrics import RequestOutput
from http_client import SseDecoder


def build_payload(chat, model, prompt, output_len, ignore_eos, extra_body=None):
    """The request body vLLM's client sends: streamed, usage in the last chunk, max_tokens =
    output_len (max_completion_tokens for chat). `prompt` is text or token ids (completions)."""
    p = {"model": model, "stream": True, "stream_options": {"include_usage": True}}
    if chat:
        if not isinstance(prompt, str):
            raise ValueError("the chat endpoint takes text prompts, not token ids")
        p["messages"] = [{"role": "user", "content": prompt}]
        p["max_completion_tokens"] = output_len
    else:
        p["prompt"] = prompt
        p["max_tokens"] = output_len
    if ignore_eos:
        p["ignore_eos"] = True
    if extra_body:
        p.update(extra_body)
    return p


def _output_of(choice, chat):
    """The generated text a choice carries, and whether it carries any output at all."""
    if not chat:
        text = choice.get("text") or ""
        return text, bool(text)
    delta = choice.get("delta") or {}
    text = ""
    for key in ("reasoning_content", "reasoning", "content"):
        if isinstance(delta.get(key), str):
            text += delta[key]
    return text, bool(text) or bool(delta.get("tool_calls"))


class StreamTimer:
    """Turns (arrival time, decoded SSE event) pairs into a RequestOutput."""

    def __init__(self, start, chat, prompt_len):
        self.out = RequestOutput(start_time=start, prompt_len=prompt_len)
        self._chat = chat
        self._output_times = []
        self._choice_times = []
        self._text = []
        self._usage = None
        self._error = None

    def on_event(self, t, event):
        if not isinstance(event, dict):
            self._error = self._error or f"an SSE event is not a JSON object: {str(event)[:200]}"
            return
        if "error" in event:  # a server may end a started stream with an error event
            self._error = self._error or f"error event: {json.dumps(event['error'])[:500]}"
            return
        choices = event.get("choices")
        if choices:
            text, has_output = _output_of(choices[0], self._chat)
            self._choice_times.append(t)
            if has_output:
                self._output_times.append(t)
            self._text.append(text)
        if isinstance(event.get("usage"), dict):
            self._usage = event["usage"]

    def finish(self):
        o = self.out
        o.generated_text = "".join(self._text)
        if self._usage:
            if isinstance(self._usage.get("completion_tokens"), int):
                o.output_tokens = self._usage["completion_tokens"]
            if isinstance(self._usage.get("prompt_tokens"), int):
                o.prompt_len = self._usage["prompt_tokens"]
        times = self._output_times or self._choice_times
        if self._error:
            o.error = self._error
        elif not times:
            o.error = "the stream ended without a chunk carrying output"
        else:
            o.success = True
            o.ttft = times[0] - o.start_time
            o.latency = times[-1] - o.start_time
            o.itl = [b - a for a, b in zip(times, times[1:])]
        return o


async def send(client, path, payload, prompt_len, timeout, clock=time.perf_counter):
    """Sends one streamed request; every failure comes back as an unsuccessful RequestOutput."""
    chat = "messages" in payload
    body = json.dumps(payload).encode()
    start = clock()
    timer = StreamTimer(start, chat, prompt_len)
    resp = None
    try:
        async with asyncio.timeout(timeout):
            resp = await client.request("POST", path, body, {"Content-Type": "application/json"})
            timer.out.http_status = resp.status
            if resp.status != 200:
                text = (await resp.read()).decode("utf-8", "replace")
                timer.out.error = f"HTTP {resp.status} {resp.reason}: {text[:500]}"
                return timer.out
            sse = SseDecoder()
            async for piece in resp.chunks():
                t = clock()
                for data in sse.feed(piece):
                    _on_data(timer, t, data)
            for data in sse.close():
                _on_data(timer, clock(), data)
    except TimeoutError:
        timer.out.error = f"no complete response within --request-timeout ({timeout} s)"
        return timer.out
    except Exception as e:  # a benchmark records a broken request and goes on
        timer.out.error = f"{type(e).__name__}: {e}"
        return timer.out
    finally:
        if resp is not None:
            resp.release()
    return timer.finish()


def _on_data(timer, t, data):
    if data.strip() == "[DONE]":
        return
    try:
        event = json.loads(data)
    except ValueError:
        event = data
    timer.on_event(t, event)
