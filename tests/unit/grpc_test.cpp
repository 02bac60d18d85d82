// http/grpc.hpp: what gRPC makes of the gateway's own answers (Envoy's mapping of HTTP
// statuses), and whether a request's TE names trailers.
#include <catch2/catch.hpp>

#include "http/grpc.hpp"

TEST_CASE("local answers as gRPC statuses", "[grpc]") {
  using fg::http::grpc_status_of;
  CHECK(grpc_status_of(429) == 8);   // RESOURCE_EXHAUSTED
  CHECK(grpc_status_of(503) == 14);  // UNAVAILABLE: a store failure under deny, no server
  CHECK(grpc_status_of(502) == 14);
  CHECK(grpc_status_of(504) == 14);
  CHECK(grpc_status_of(404) == 12);  // UNIMPLEMENTED: no route
  CHECK(grpc_status_of(401) == 16);
  CHECK(grpc_status_of(403) == 7);
  CHECK(grpc_status_of(400) == 13);
  CHECK(grpc_status_of(413) == 2);   // UNKNOWN
  CHECK(fg::http::grpc_message_of(429) == "rate limited");
}

TEST_CASE("a call's grpc-status as the HTTP status passive health reads (Envoy's mapping)", "[grpc]") {
  using fg::http::http_status_of_grpc;
  CHECK(http_status_of_grpc(0) == 200);
  CHECK(http_status_of_grpc(14) == 503);  // UNAVAILABLE: what eject.statuses: [503] catches
  CHECK(http_status_of_grpc(4) == 504);
  CHECK(http_status_of_grpc(8) == 429);
  CHECK(http_status_of_grpc(12) == 501);
  CHECK(http_status_of_grpc(13) == 500);
  CHECK(http_status_of_grpc(2) == 500);
  CHECK(http_status_of_grpc(15) == 500);
  CHECK(http_status_of_grpc(3) == 400);
  CHECK(http_status_of_grpc(16) == 401);
  CHECK(http_status_of_grpc(1) == 499);
  CHECK(http_status_of_grpc(99) == 500);  // not a known status
}

TEST_CASE("TE: trailers among a request's codings", "[grpc]") {
  using fg::http::te_trailers;
  CHECK(te_trailers("trailers"));
  CHECK(te_trailers("Trailers"));
  CHECK(te_trailers("gzip;q=0.5, trailers"));
  CHECK(te_trailers(" trailers ;q=1"));
  CHECK_FALSE(te_trailers(""));
  CHECK_FALSE(te_trailers("gzip"));
  CHECK_FALSE(te_trailers("trailersx"));
  CHECK_FALSE(te_trailers("xtrailers"));
}

TEST_CASE("grpc-timeout: digits and a unit, rounded up to milliseconds", "[grpc]") {
  using fg::http::grpc_timeout;
  using namespace std::chrono_literals;
  CHECK(grpc_timeout("500m") == 500ms);
  CHECK(grpc_timeout("2S") == 2000ms);
  CHECK(grpc_timeout("1M") == 60000ms);
  CHECK(grpc_timeout("1H") == 3600000ms);
  CHECK(grpc_timeout("1500u") == 2ms);
  CHECK(grpc_timeout("1n") == 1ms);
  CHECK(grpc_timeout("0m") == 0ms);
  CHECK(grpc_timeout("99999999H") == std::chrono::milliseconds(365ull * 24 * 3600000));  // (a year at most)
  CHECK(grpc_timeout("2562047H") == std::chrono::milliseconds(365ull * 24 * 3600000));
  CHECK_FALSE(grpc_timeout("123456789S"));  // (more than 8 digits)
  CHECK_FALSE(grpc_timeout("10"));
  CHECK_FALSE(grpc_timeout("m"));
  CHECK_FALSE(grpc_timeout("1x"));
  CHECK_FALSE(grpc_timeout("-1S"));
  CHECK_FALSE(grpc_timeout(""));
}
