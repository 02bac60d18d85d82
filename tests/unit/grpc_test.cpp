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
