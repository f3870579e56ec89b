// Structured inputs for fuzz_http_request: a short program of byte-coded steps that expands to a
// long HTTP request (headers, chunk extensions and trailers of up to 256 KiB, thousands of
// chunks), which raw inputs of at most -max_len bytes never reach. An input whose first byte is
// kStructuredMark is such a program; any other input is sent as it is.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mxserve::fuzz {

inline constexpr uint8_t kStructuredMark = 0xFF;
inline constexpr size_t kMaxExpandedBytes = 4u << 20;

// Reads the program data[0..size) (after the mark): each step is an opcode byte and up to four
// argument bytes (missing ones read as 0). Never longer than kMaxExpandedBytes.
inline std::string ExpandHttpProgram(const uint8_t* data, size_t size) {
  static const char* const kMethods[] = {"GET", "POST", "PUT", "HEAD", "OPTIONS"};
  static const char* const kPaths[] = {"/health", "/health/live", "/v1/chat/completions",
                                       "/v1/completions", "/tokenize", "/v1/models",
                                       "/v2/models/tiny/ready", "/metrics"};
  static const char* const kNames[] = {"Host", "Transfer-Encoding", "Content-Length", "Expect",
                                       "Authorization", "Connection", "X-Filler", "Content-Type"};
  static const char* const kValues[] = {"chunked", "xchunked", "gzip, chunked", "100-continue",
                                        "close", "keep-alive", "Bearer k", "7", "0",
                                        "application/json"};
  std::string out;
  size_t i = 0;
  auto arg = [&]() -> uint32_t { return i < size ? data[i++] : 0; };
  auto fill = [&](size_t n, char c) {
    n = std::min(n, kMaxExpandedBytes - std::min(out.size(), kMaxExpandedBytes));
    out.append(n, c);
  };
  while (i < size && out.size() < kMaxExpandedBytes) {
    const uint32_t op = arg() % 9;
    const uint32_t a = arg(), b = arg(), c = arg(), d = arg();
    const size_t len = ((a << 8) | b) * 4;  // 0 .. 256 KiB
    const char filler = static_cast<char>(c ? c : 'a');
    switch (op) {
      case 0:  // request line
        out += kMethods[a % 5];
        out += ' ';
        out += kPaths[b % 8];
        out += (c & 1) ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n";
        break;
      case 1:  // a header with a known value
        out += kNames[a % 8];
        out += ": ";
        out += kValues[b % 10];
        out += "\r\n";
        break;
      case 2:  // a long header
        out += kNames[d % 8];
        out += ": ";
        fill(len, filler);
        out += "\r\n";
        break;
      case 3:  // end of the header
        out += "\r\n";
        break;
      case 4: {  // one chunk of `len` bytes, with an extension of c * 1 KiB
        static const char kHex[] = "0123456789abcdef";
        std::string hex;
        for (size_t v = len ? len : 1; v; v >>= 4) hex.insert(hex.begin(), kHex[v & 15]);
        out += hex;
        if (c) {
          out += ";e=";
          fill(size_t{c} << 10, 'x');
        }
        out += "\r\n";
        fill(len ? len : 1, static_cast<char>('0' + d % 10));
        out += "\r\n";
        break;
      }
      case 5:  // many one-byte chunks
        for (uint32_t k = 0; k < ((a << 8) | b) && out.size() < kMaxExpandedBytes; ++k) {
          out += "1\r\nz\r\n";
        }
        break;
      case 6:  // the last chunk
        out += "0\r\n";
        break;
      case 7:  // a trailer field (after the last chunk), long
        out += "X-Trailer: ";
        fill(len, filler);
        out += "\r\n";
        break;
      case 8:  // a JSON body of `len` bytes (a prompt), for Content-Length requests
        out += "{\"model\":\"tiny\",\"prompt\":\"";
        fill(len, 'p');
        out += "\"}";
        break;
    }
  }
  if (out.size() > kMaxExpandedBytes) out.resize(kMaxExpandedBytes);
  return out;
}

}  // namespace mxserve::fuzz
