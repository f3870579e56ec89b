#include "coordinator/frontends/http_framing.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace mxserve::frontends {

std::optional<std::pair<int, std::string>> FramingError(
    const std::vector<std::pair<std::string, std::string>>& headers, bool http10) {
  size_t hosts = 0;
  bool content_length = false, transfer_encoding = false;
  std::vector<std::string> codings;  // in order, over every Transfer-Encoding field
  for (const auto& [name, value] : headers) {
    if (absl::EqualsIgnoreCase(name, "host")) ++hosts;
    if (absl::EqualsIgnoreCase(name, "content-length")) content_length = true;
    if (!absl::EqualsIgnoreCase(name, "transfer-encoding")) continue;
    transfer_encoding = true;
    for (absl::string_view c : absl::StrSplit(value, ',')) {
      c = absl::StripAsciiWhitespace(c);
      if (!c.empty()) codings.push_back(absl::AsciiStrToLower(c));
    }
  }
  if (!http10 && hosts == 0) return std::make_pair(400, "HTTP/1.1 request without a Host header");
  if (hosts > 1) return std::make_pair(400, "more than one Host header");
  if (!transfer_encoding) return std::nullopt;
  if (http10) return std::make_pair(400, "Transfer-Encoding in an HTTP/1.0 request");
  if (content_length) return std::make_pair(400, "both Transfer-Encoding and Content-Length");
  if (codings.empty() || codings.back() != "chunked") {
    return std::make_pair(400, "Transfer-Encoding must end with chunked");
  }
  for (size_t i = 0; i + 1 < codings.size(); ++i) {
    if (codings[i] == "chunked") return std::make_pair(400, "Transfer-Encoding chunked given twice");
  }
  if (codings.size() > 1) {
    return std::make_pair(501, "only the chunked transfer coding is implemented");
  }
  return std::nullopt;
}

}  // namespace mxserve::frontends
