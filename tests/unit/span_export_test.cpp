// Tests for the span export's body (OTLP/HTTP JSON) and the trace context helpers the
// exchange uses to give each upstream try a span of its own.
#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <string>

#include "http/trace_context.hpp"
#include "obs/span_export.hpp"

namespace json = boost::json;

static std::string_view str(const json::value& v) { return v.as_string(); }

TEST_CASE("span export: a request's span and a try's, as OTLP's JSON mapping has them", "[tracing]") {
  fg::config::span_export_config cfg;
  cfg.service_name = "edge";
  std::vector<fg::obs::span> spans(2);
  auto& s = spans[0];
  std::string trace(32, 'a'), id(16, 'b'), parent(16, 'c'), child(16, 'd');
  std::copy(trace.begin(), trace.end(), s.trace_id.begin());
  std::copy(id.begin(), id.end(), s.span_id.begin());
  std::copy(parent.begin(), parent.end(), s.parent_id.begin());
  s.name = "GET api";
  s.start_ns = 1'700'000'000'000'000'123;
  s.end_ns = 1'700'000'000'000'500'000;
  s.add("http.request.method", "GET");
  s.add("http.response.status_code", std::int64_t{429});
  s.add("floodgate.limit", "say \"hi\"\n");  // (escaped as JSON)
  auto& c = spans[1];
  c.trace_id = s.trace_id;
  std::copy(child.begin(), child.end(), c.span_id.begin());
  c.parent_id = s.span_id;
  c.kind = 3;
  c.error = true;
  c.message = "connect: refused";

  const auto doc = json::parse(fg::obs::otlp_json(cfg, spans));
  const auto& rs = doc.at("resourceSpans").as_array().at(0);
  const auto& attr = rs.at("resource").at("attributes").as_array().at(0);
  CHECK(attr.at("key") == "service.name");
  CHECK(attr.at("value").at("stringValue") == "edge");
  const auto& ss = rs.at("scopeSpans").as_array().at(0);
  CHECK(ss.at("scope").at("name") == "floodgate");
  const auto& list = ss.at("spans").as_array();
  REQUIRE(list.size() == 2);
  const auto& a = list[0].as_object();
  CHECK(str(a.at("traceId")) == trace);
  CHECK(str(a.at("spanId")) == id);
  CHECK(str(a.at("parentSpanId")) == parent);
  CHECK(a.at("kind") == 2);
  // (64-bit integers are strings in the mapping)
  CHECK(a.at("startTimeUnixNano") == "1700000000000000123");
  CHECK(a.at("endTimeUnixNano") == "1700000000000500000");
  const auto& attrs = a.at("attributes").as_array();
  REQUIRE(attrs.size() == 3);
  CHECK(attrs[1].at("key") == "http.response.status_code");
  CHECK(attrs[1].at("value").at("intValue") == "429");
  CHECK(attrs[2].at("value").at("stringValue") == "say \"hi\"\n");
  CHECK(a.at("status").as_object().empty());  // UNSET
  const auto& b = list[1].as_object();
  CHECK(str(b.at("parentSpanId")) == id);
  CHECK(b.at("kind") == 3);
  CHECK(b.at("status").at("code") == 2);
  CHECK(b.at("status").at("message") == "connect: refused");

  // A root span has no parentSpanId.
  spans.resize(1);
  spans[0].parent_id = {};
  const auto root = json::parse(fg::obs::otlp_json(cfg, spans));
  const auto& only = root.at("resourceSpans").as_array()[0].at("scopeSpans").as_array()[0].at("spans").as_array()[0];
  CHECK_FALSE(only.as_object().contains("parentSpanId"));
}

TEST_CASE("trace context: a try's span restated in the head sent upstream", "[tracing]") {
  std::string tp;
  fg::http::make_traceparent(std::nullopt, 1.0, tp);
  REQUIRE(tp.size() == 55);
  CHECK(fg::http::sampled_of(tp));
  std::string unsampled;
  fg::http::make_traceparent(std::nullopt, 0.0, unsampled);
  CHECK_FALSE(fg::http::sampled_of(unsampled));

  // A client's field holding the same trace comes before the gateway's traceparent: the
  // gateway's own is the one restated.
  std::string head = "GET / HTTP/1.1\r\nx-echo: " + tp + "\r\ntraceparent: " + tp + "\r\n\r\n";
  char id[16];
  fg::http::make_span_id(id);
  const std::string_view span(id, 16);
  CHECK(span.find_first_not_of("0123456789abcdef") == std::string_view::npos);
  REQUIRE(fg::http::restate_parent(head, tp, span));
  const auto ours = head.find("traceparent: ") + 13;
  CHECK(head.substr(ours, 36) == tp.substr(0, 36));
  CHECK(head.substr(ours + 36, 16) == span);
  CHECK(head.substr(ours + 52, 3) == tp.substr(52, 3));
  CHECK(head.find("x-echo: " + tp) != std::string::npos);  // (the client's field as it was)
  // A second try: its own id in the same place.
  char again[16];
  fg::http::make_span_id(again);
  REQUIRE(fg::http::restate_parent(head, tp, std::string_view(again, 16)));
  CHECK(head.substr(ours + 36, 16) == std::string_view(again, 16));
  std::string none = "GET / HTTP/1.1\r\n\r\n";
  CHECK_FALSE(fg::http::restate_parent(none, tp, span));
}

TEST_CASE("span export: what a client wrote goes out as well-formed JSON and UTF-8", "[tracing]") {
  fg::config::span_export_config cfg;
  std::vector<fg::obs::span> spans(1);
  std::string id(16, '1');
  std::copy(id.begin(), id.end(), spans[0].span_id.begin());
  spans[0].trace_id.fill('2');
  // a control character, a quote and a backslash; a stray continuation byte; a lead byte
  // cut short; an overlong '/'; a surrogate; past U+10FFFF; then good 2-, 3- and 4-byte
  // sequences
  const std::string path = std::string("/a\x01\"\\b\x80") + "\xc3" + "/\xc0\xaf/\xed\xa0\x80/\xf4\x90\x80\x80/" +
                           "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  spans[0].add("url.path", path);
  const auto text = fg::obs::otlp_json(cfg, spans);
  // (Boost.JSON's parser refuses malformed UTF-8: this parses only if all was mended)
  const auto doc = json::parse(text);
  const auto& s = doc.at("resourceSpans").as_array()[0].at("scopeSpans").as_array()[0].at("spans").as_array()[0];
  const std::string got(str(s.at("attributes").as_array()[0].at("value").at("stringValue")));
  const std::string bad = "\xef\xbf\xbd";  // U+FFFD
  CHECK(got == "/a\x01\"\\b" + bad + bad + "/" + bad + bad + "/" + bad + bad + bad + "/" + bad + bad + bad + bad +
                   "/\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  CHECK(text.find("\\u0001") != std::string::npos);
}
