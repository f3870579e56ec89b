"""The HTTP/1.1 client and SSE decoding against a local asyncio server (127.0.0.1, port 0), and
one streamed request timed on a scripted clock."""

import asyncio
import itertools
import json
import unittest

from http_client import HttpClient, HttpError, SseDecoder
from streaming_request import build_payload, send


class SseDecoderTest(unittest.TestCase):
    def test_events_split_anywhere(self):
        stream = ('data: {"a": 1}\n\n: a comment\n\nevent: x\r\ndata: line1\r\ndata: line2\r\n\r\n'
                  'data:é\n\ndata: [DONE]\n\n').encode()
        want = ['{"a": 1}', "line1\nline2", "é", "[DONE]"]
        for cut in range(1, len(stream)):  # every split point, the 2-byte é included
            d = SseDecoder()
            got = d.feed(stream[:cut]) + d.feed(stream[cut:]) + d.close()
            self.assertEqual(got, want, cut)

    def test_last_event_without_blank_line(self):
        d = SseDecoder()
        self.assertEqual(d.feed(b"data: 1\n\ndata: 2"), ["1"])
        self.assertEqual(d.close(), ["2"])


class FakeServer:
    """Answers each request with the next of `responses` (raw bytes) and counts connections;
    records each request's head and body."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.connections = 0
        self.requests = []

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while self.responses:
                head = await reader.readuntil(b"\r\n\r\n")
                n = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        n = int(line.split(":")[1])
                self.requests.append((head.decode(), await reader.readexactly(n)))
                for piece in self.responses.pop(0):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    def close(self):
        self.server.close()


def chunked(*parts):
    out = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n"]
    for p in parts:
        out.append(b"%x;ext=1\r\n%s\r\n" % (len(p), p))
    out.append(b"0\r\nTrailer: x\r\n\r\n")
    return out


def sse(obj):
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def run(coro):
    return asyncio.run(coro)


class HttpClientTest(unittest.TestCase):
    def test_keep_alive_content_length_and_chunked(self):
        async def go():
            body = b'{"data": [{"id": "tiny"}]}'
            srv = FakeServer([
                [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body), body],
                chunked(b"hel", b"lo"),
                [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil ", b"close"],
            ])
            port = await srv.start()
            c = HttpClient(f"http://127.0.0.1:{port}/", {"Authorization": "Bearer k"})
            status, j = await c.json_call("GET", "/v1/models")
            self.assertEqual((status, j["data"][0]["id"]), (200, "tiny"))
            r = await c.request("POST", "/x", b"{}")
            self.assertEqual(await r.read(), b"hello")
            r.release()
            r = await c.request("GET", "/y")
            self.assertEqual(await r.read(), b"until close")
            r.release()
            self.assertEqual(srv.connections, 1)  # one connection carried all three
            self.assertIn("Authorization: Bearer k", srv.requests[0][0])
            self.assertTrue(srv.requests[0][0].startswith("GET /v1/models HTTP/1.1\r\n"))
            self.assertEqual(c._idle, [])  # "Connection: close" is not pooled
            c.close()
            srv.close()
        run(go())

    def test_broken_framing_is_an_error(self):
        async def go():
            srv = FakeServer([[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]])
            port = await srv.start()
            c = HttpClient(f"http://127.0.0.1:{port}")
            r = await c.request("GET", "/")
            with self.assertRaises(HttpError):
                await r.read()
            r.release()
            srv.close()
        run(go())

    def test_bad_base_url(self):
        with self.assertRaises(ValueError):
            HttpClient("ftp://x")


class SendTest(unittest.TestCase):
    def test_streamed_request_on_a_scripted_clock(self):
        """Each HTTP chunk is read at the next tick of the clock (start = 0): TTFT is the
        first text chunk, ITL the gaps between text chunks, E2E the last text chunk."""
        async def go():
            events = [sse({"choices": [{"text": "a"}]}),
                      sse({"choices": [{"text": "b"}]}),
                      sse({"choices": [{"text": ""}]}),          # holds nothing: no gap
                      sse({"choices": [{"text": "c"}]}),
                      sse({"choices": [{"text": "", "finish_reason": "length"}]}),
                      sse({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 4}}),
                      sse(b"[DONE]")]
            srv = FakeServer([chunked(*events)])
            port = await srv.start()
            c = HttpClient(f"http://127.0.0.1:{port}")
            payload = build_payload(False, "tiny", [1, 2, 3, 4], 4, True)
            clock = itertools.count().__next__
            o = await send(c, "/v1/completions", payload, 4, 10.0, clock=clock)
            self.assertTrue(o.success, o.error)
            self.assertEqual((o.start_time, o.ttft, o.latency, o.itl), (0, 1, 4, [1, 2]))
            self.assertEqual((o.output_tokens, o.prompt_len, o.generated_text), (4, 4, "abc"))
            sent = json.loads(srv.requests[0][1])
            self.assertEqual(sent["prompt"], [1, 2, 3, 4])
            self.assertEqual((sent["max_tokens"], sent["ignore_eos"], sent["stream"]),
                             (4, True, True))
            self.assertEqual(sent["stream_options"], {"include_usage": True})
            c.close()
            srv.close()
        run(go())

    def test_http_error_and_refused_connection_are_failed_requests(self):
        async def go():
            body = b'{"error": {"message": "bad max_tokens"}}'
            srv = FakeServer([[b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n"
                               % len(body), body]])
            port = await srv.start()
            c = HttpClient(f"http://127.0.0.1:{port}")
            o = await send(c, "/v1/completions", build_payload(False, "m", "hi", 1, False), 1, 5)
            self.assertFalse(o.success)
            self.assertIn("HTTP 400", o.error)
            self.assertIn("bad max_tokens", o.error)
            srv.close()
            await srv.server.wait_closed()
            c.close()
            o = await send(c, "/v1/completions", build_payload(False, "m", "hi", 1, False), 1, 5)
            self.assertFalse(o.success)
            self.assertTrue(o.error)
        run(go())

    def test_chat_payload(self):
        p = build_payload(True, "m", "hi", 7, False, {"temperature": 0})
        self.assertEqual(p["messages"], [{"role": "user", "content": "hi"}])
        self.assertEqual((p["max_completion_tokens"], p["temperature"]), (7, 0))
        self.assertNotIn("ignore_eos", p)
        with self.assertRaises(ValueError):
            build_payload(True, "m", [1, 2], 7, False)


if __name__ == "__main__":
    unittest.main()
