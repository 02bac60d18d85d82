#include <catch2/catch.hpp>

#include <string>

#include "http/trace_context.hpp"

using fg::http::make_traceparent;
using fg::http::parse_traceparent;
using fg::http::trace_id_of;

TEST_CASE("parse_traceparent: W3C Trace Context's grammar", "[trace_context]") {
  auto ok = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  REQUIRE(ok);
  CHECK(ok->trace_id == "0af7651916cd43dd8448eb211c80319c");
  CHECK(ok->parent_id == "b7ad6b7169203331");
  CHECK(ok->sampled);
  auto unsampled = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02");
  REQUIRE(unsampled);
  CHECK_FALSE(unsampled->sampled);
  // A later version: its first 55 characters, when a '-' or nothing follows.
  CHECK(parse_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"));
  CHECK(parse_traceparent("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
  for (const char* bad : {
           "",
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-",  // version 00: 55 exactly
           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
           "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  // upper case
           "00-00000000000000000000000000000000-b7ad6b7169203331-01",  // all-zero trace id
           "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  // all-zero parent id
           "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  // version ff
           "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
           "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
           "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
           " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
       }) {
    INFO(bad);
    CHECK_FALSE(parse_traceparent(bad));
  }
}

TEST_CASE("make_traceparent: the incoming trace continued, or a new one, under a new span", "[trace_context]") {
  std::string out;
  auto in = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  make_traceparent(in, 0.0, out);
  REQUIRE(out.size() == 55);
  CHECK(trace_id_of(out) == "0af7651916cd43dd8448eb211c80319c");
  auto again = parse_traceparent(out);
  REQUIRE(again);
  CHECK(again->parent_id != "b7ad6b7169203331");  // the gateway's span
  CHECK(again->sampled);                          // the incoming flag, whatever the ratio

  // New traces: valid, distinct, sampled as the ratio says (0 never, 1 always).
  std::string a, b;
  make_traceparent(std::nullopt, 0.0, a);
  make_traceparent(std::nullopt, 1.0, b);
  auto pa = parse_traceparent(a), pb = parse_traceparent(b);
  REQUIRE(pa);
  REQUIRE(pb);
  CHECK_FALSE(pa->sampled);
  CHECK(pb->sampled);
  CHECK(pa->trace_id != pb->trace_id);
  int sampled = 0;
  for (int i = 0; i < 10000; ++i) {
    make_traceparent(std::nullopt, 0.25, a);
    sampled += parse_traceparent(a)->sampled;
  }
  CHECK(sampled > 2000);
  CHECK(sampled < 3000);
}
