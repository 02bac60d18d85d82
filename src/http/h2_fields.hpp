#pragma once
// Heads as HTTP/2 carries them (RFC 9113 §8.2, §8.3): a response's status and its fields
// with lower-case names and none of HTTP/1.1's connection-specific ones. Pure: the
// gateway builds every answer's head as HTTP/1.1 text (forwarder's
// build_downstream_response, responses' render), and an HTTP/2 stream sends that head's
// fields through this.
#include <nghttp2/nghttp2.h>

#include <string>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace fg::http {

// Fields that only mean something to one HTTP/1.1 connection (RFC 9113 §8.2.2): never
// sent on an HTTP/2 stream. `name` in lower case.
bool connection_specific(std::string_view name);

// A response head for an HTTP/2 stream: `fields` (":status" first) point into `storage`.
struct h2_head {
  std::string storage;
  std::vector<nghttp2_nv> fields;
};

// `head`: an HTTP/1.1 response head ("HTTP/1.1 200 OK\r\nName: value\r\n...\r\n", the
// blank line optional). False when its status line is not one.
bool h2_head_of(std::string_view head, h2_head& out);

// A request head for an HTTP/2 upstream from the HTTP/1.1 head the forwarder built
// ("GET /x HTTP/1.1\r\nHost: a\r\n...\r\n"): :method, :scheme (`scheme`), :authority
// (its Host), :path, then its fields in lower case but the connection-specific ones;
// `te: trailers` when `te_trailers` (gRPC's: the one TE value HTTP/2 carries). False
// when its request line is not one.
bool h2_request_of(std::string_view head, std::string_view scheme, bool te_trailers, h2_head& out);

// An HTTP/2 upstream's response head as HTTP/1.1 text for the relay's parser: its
// status line, its fields (none of them connection-specific), and its framing: its
// Content-Length if it has one, else `Content-Length: 0` when `ended` (END_STREAM came
// with the head), else chunked (a length the downstream does not know).
void h1_head_of(unsigned status, std::span<const std::pair<std::string, std::string>> fields, bool ended,
                std::string& out);

// The field of a request head that HTTP/2 gives as several (RFC 9113 §8.2.3): each
// `cookie` value appended to `joined` with "; ".
void join_cookie(std::string& joined, std::string_view value);

}  // namespace fg::http
