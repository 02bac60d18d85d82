#pragma once
// Heads as HTTP/2 carries them (RFC 9113 §8.2, §8.3): a response's status and its fields
// with lower-case names and none of HTTP/1.1's connection-specific ones. Pure: the
// gateway builds every answer's head as HTTP/1.1 text (forwarder's
// build_downstream_response, responses' render), and an HTTP/2 stream sends that head's
// fields through this.
#include <nghttp2/nghttp2.h>

#include <string>
#include <string_view>
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

// The field of a request head that HTTP/2 gives as several (RFC 9113 §8.2.3): each
// `cookie` value appended to `joined` with "; ".
void join_cookie(std::string& joined, std::string_view value);

}  // namespace fg::http
