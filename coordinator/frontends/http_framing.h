// RFC 9112's rules for a request's framing and Host header (sections 3.2, 6.1, 6.3), checked on
// the header before any body is read: the smuggling-prone shapes are refused, not guessed at.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mxserve::frontends {

// What is wrong with a request's header fields, as a status and a message: 400 for HTTP/1.1
// without exactly one Host, Transfer-Encoding with Content-Length or in HTTP/1.0, a last
// transfer coding other than chunked, or chunked twice; 501 for a coding before chunked (none
// is implemented). nullopt when the framing is sound. Header names compare case-insensitively;
// a field may be given several times and hold a comma-separated list.
std::optional<std::pair<int, std::string>> FramingError(
    const std::vector<std::pair<std::string, std::string>>& headers, bool http10);

}  // namespace mxserve::frontends
