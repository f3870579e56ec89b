"""A small asyncio HTTP/1.1 client for the benchmark: keep-alive connections reused across
requests, Content-Length, chunked and read-to-close bodies, body pieces handed over as they
arrive (for Server-Sent Events), http and https. Standard library only."""

import asyncio
import codecs
import json
import ssl
import urllib.parse


class HttpError(RuntimeError):
    """The connection or the response broke HTTP/1.1 framing."""


class Response:
    """A response whose body is read as it arrives (chunks()) or whole (read())."""

    def __init__(self, client, reader, writer, status, reason, headers, method):
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-case names
        self._client, self._reader, self._writer = client, reader, writer
        self._method = method
        self._done = False  # the body was read to its end
        self._reusable = "close" not in headers.get("connection", "").lower()

    async def chunks(self):
        """The body's bytes, piece by piece, as the server sends them."""
        r, h = self._reader, self.headers
        if self._method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200:
            self._done = True
            return
        if "chunked" in h.get("transfer-encoding", "").lower():
            while True:
                line = await r.readline()
                if not line.endswith(b"\n"):
                    raise HttpError("connection closed inside a chunked body")
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise HttpError(f"bad chunk size line {line[:40]!r}") from None
                if size == 0:
                    while (await r.readline()).strip():  # trailers
                        pass
                    self._done = True
                    return
                data = await r.readexactly(size)
                if (await r.readexactly(2)) != b"\r\n":
                    raise HttpError("chunk not followed by CRLF")
                yield data
        elif "content-length" in h:
            left = int(h["content-length"])
            while left > 0:
                data = await r.read(min(left, 1 << 16))
                if not data:
                    raise HttpError(f"connection closed with {left} body bytes unread")
                left -= len(data)
                yield data
            self._done = True
        else:  # the body ends when the server closes
            self._reusable = False
            while data := await r.read(1 << 16):
                yield data
            self._done = True

    async def read(self):
        return b"".join([c async for c in self.chunks()])

    def release(self):
        """Hands the connection back for reuse when the body was read whole, else closes it."""
        if self._writer is None:
            return
        if self._done and self._reusable:
            self._client._idle.append((self._reader, self._writer))
        else:
            self._writer.close()
        self._writer = None


class HttpClient:
    """Requests against one origin; `base_url`'s path is prefixed to every request path."""

    def __init__(self, base_url, headers=None):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"--base-url must be http://HOST[:PORT] or https://..., "
                             f"got {base_url!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self._ssl = ssl.create_default_context() if u.scheme == "https" else None
        self._headers = dict(headers or {})
        self._idle = []

    async def _connect(self):
        return await asyncio.open_connection(self.host, self.port, ssl=self._ssl,
                                             limit=1 << 20)

    def _head(self, method, path, body, headers):
        host = self.host if ":" not in self.host else f"[{self.host}]"
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {host}:{self.port}",
                 "User-Agent: mxserve-bench-serve", "Accept: */*",
                 f"Content-Length: {len(body)}"]
        for k, v in {**self._headers, **(headers or {})}.items():
            lines.append(f"{k}: {v}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def request(self, method, path, body=b"", headers=None):
        """Sends a request; returns its Response once the status line and headers are in. The
        caller reads the body and calls release(). A reused connection the server closed while
        idle is retried once on a fresh one."""
        while True:
            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await self._connect()
            try:
                writer.write(self._head(method, path, body, headers) + body)
                await writer.drain()
                status_line = await reader.readline()
                if not status_line:
                    raise ConnectionResetError("connection closed before a status line")
            except (ConnectionError, OSError):
                writer.close()
                if reused:
                    continue
                raise
            break
        parts = status_line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            writer.close()
            raise HttpError(f"bad status line {status_line[:80]!r}")
        headers_in = {}
        while True:
            line = await reader.readline()
            if not line.endswith(b"\n"):
                writer.close()
                raise HttpError("connection closed inside the response headers")
            line = line.decode("latin-1").rstrip("\r\n")
            if not line:
                break
            k, _, v = line.partition(":")
            headers_in[k.strip().lower()] = v.strip()
        return Response(self, reader, writer, int(parts[1]), parts[2] if len(parts) > 2 else "",
                        headers_in, method)

    async def json_call(self, method, path, payload=None, timeout=120):
        """A whole JSON request and response: (status, decoded body or the text when not JSON)."""
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        resp = None
        try:
            async with asyncio.timeout(timeout):
                resp = await self.request(method, path, body, headers)
                data = await resp.read()
        except TimeoutError:
            raise HttpError(f"{method} {path}: no answer within {timeout} s") from None
        finally:
            if resp is not None:
                resp.release()
        try:
            return resp.status, json.loads(data)
        except ValueError:
            return resp.status, data.decode("utf-8", "replace")

    def close(self):
        for _, w in self._idle:
            w.close()
        self._idle.clear()


class SseDecoder:
    """Splits a Server-Sent Events byte stream into the data of each event (multi-line data
    joined by newlines; comments and other fields dropped)."""

    def __init__(self):
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._buf = ""

    def feed(self, data):
        self._buf = (self._buf + self._text.decode(data)).replace("\r\n", "\n")
        out = []
        while "\n\n" in self._buf:
            block, self._buf = self._buf.split("\n\n", 1)
            self._event(block, out)
        return out

    def close(self):
        """Events left when the stream ended without a blank line after the last one."""
        out = []
        self._buf += self._text.decode(b"", final=True)
        if self._buf.strip():
            self._event(self._buf.replace("\r", ""), out)
        self._buf = ""
        return out

    @staticmethod
    def _event(block, out):
        data = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
        if data:
            out.append("\n".join(data))
