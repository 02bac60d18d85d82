#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "routing/route_table.hpp"

using fg::routing::normalize_host;
using fg::routing::normalize_target_path;
using fg::routing::route_table;

namespace {

// A route as the table takes it.
struct route {
  std::string host;
  std::vector<std::string> methods;
  std::string path;
  bool prefix = false;
};

route exact(std::string path, std::vector<std::string> methods = {}, std::string host = {}) {
  return {std::move(host), std::move(methods), std::move(path), false};
}

route prefix(std::string path, std::vector<std::string> methods = {}, std::string host = {}) {
  return {std::move(host), std::move(methods), std::move(path), true};
}

route_table table(std::initializer_list<route> routes) {
  route_table t;
  for (const auto& r : routes) t.add(r.host, r.methods, r.path, r.prefix);
  return t;
}

// The route a request target takes in `t` (after normalize_target_path), for GET.
int route_of(const route_table& t, std::string_view target) {
  std::string p;
  REQUIRE(normalize_target_path(target, p));
  return t.match("h", "GET", p);
}

// normalize_target_path, with the result or "<invalid>".
std::string norm(std::string_view target) {
  std::string out = "unchanged";
  if (!normalize_target_path(target, out)) return "<invalid>";
  return out;
}

}  // namespace

TEST_CASE("route_table: empty table matches nothing", "[routing]") {
  route_table empty;
  CHECK(empty.match("example.com", "GET", "/") == -1);
  CHECK(table({}).match("example.com", "GET", "/") == -1);
}

TEST_CASE("route_table: first match in file order", "[routing]") {
  auto t = table({prefix("/api/"), prefix("/api/v1/"), exact("/api/v1/users"), prefix("/")});
  CHECK(t.match("h", "GET", "/api/v1/users") == 0);  // earlier broader prefix wins
  CHECK(t.match("h", "GET", "/api/x") == 0);
  CHECK(t.match("h", "GET", "/other") == 3);
  CHECK(t.match("h", "GET", "/") == 3);

  auto t2 = table({exact("/api/v1/users"), prefix("/api/v1/"), prefix("/api/")});
  CHECK(t2.match("h", "GET", "/api/v1/users") == 0);
  CHECK(t2.match("h", "GET", "/api/v1/users/1") == 1);
  CHECK(t2.match("h", "GET", "/api/v2") == 2);
  CHECK(t2.match("h", "GET", "/apx") == -1);
}

TEST_CASE("route_table: exact vs prefix path", "[routing]") {
  auto t = table({exact("/login"), prefix("/static/")});
  CHECK(t.match("h", "GET", "/login") == 0);
  // one trailing slash, as Spring MVC 5 serves it with the "/login" handler
  CHECK(t.match("h", "GET", "/login/") == 0);
  CHECK(t.match("h", "GET", "/login//") == -1);
  CHECK(t.match("h", "GET", "/login/x") == -1);
  CHECK(t.match("h", "GET", "/login2") == -1);
  CHECK(t.match("h", "GET", "/logi") == -1);
  CHECK(t.match("h", "GET", "/LOGIN") == -1);  // paths are case-sensitive
  CHECK(t.match("h", "GET", "/static/") == 1);
  CHECK(t.match("h", "GET", "/static/app.js") == 1);
  CHECK(t.match("h", "GET", "/static") == -1);
  CHECK(t.match("h", "GET", "/") == -1);
  auto slash = table({exact("/dir/"), exact("/")});
  CHECK(slash.match("h", "GET", "/dir/") == 0);
  CHECK(slash.match("h", "GET", "/dir") == -1);
  CHECK(slash.match("h", "GET", "/dir//") == -1);
  CHECK(slash.match("h", "GET", "/") == 1);

  // A prefix is a plain string prefix, not a segment prefix.
  auto p = table({prefix("/api")});
  CHECK(p.match("h", "GET", "/api") == 0);
  CHECK(p.match("h", "GET", "/api/x") == 0);
  CHECK(p.match("h", "GET", "/apiary") == 0);
  CHECK(p.match("h", "GET", "/ap") == -1);

  // Neither path nor path_prefix: an empty prefix, matching every path.
  auto any = table({prefix("")});
  CHECK(any.match("h", "GET", "/") == 0);
  CHECK(any.match("h", "GET", "/anything/at/all") == 0);
}

TEST_CASE("route_table: method sets, empty = any", "[routing]") {
  auto t = table({prefix("/w/", {"POST", "PUT"}), prefix("/w/", {"GET"}), prefix("/any/")});
  CHECK(t.match("h", "POST", "/w/1") == 0);
  CHECK(t.match("h", "PUT", "/w/1") == 0);
  CHECK(t.match("h", "GET", "/w/1") == 1);
  CHECK(t.match("h", "DELETE", "/w/1") == -1);
  CHECK(t.match("h", "post", "/w/1") == -1);  // methods are case-sensitive tokens
  CHECK(t.match("h", "POS", "/w/1") == -1);
  CHECK(t.match("h", "GET", "/any/x") == 2);
  CHECK(t.match("h", "DELETE", "/any/x") == 2);
  CHECK(t.match("h", "PATCH", "/any/x") == 2);
  CHECK(t.match("h", "BREW", "/any/x") == 2);
  // HEAD is served by GET handlers upstream, so a GET route takes it.
  CHECK(t.match("h", "HEAD", "/w/1") == 1);
  auto head_first = table({prefix("/w/", {"HEAD"}), prefix("/w/", {"GET"})});
  CHECK(head_first.match("h", "HEAD", "/w/1") == 0);
  auto post_only = table({prefix("/w/", {"POST"}), prefix("/")});
  CHECK(post_only.match("h", "HEAD", "/w/1") == 1);
}

TEST_CASE("route_table: host match is case-insensitive, ignores port and trailing dot", "[routing]") {
  auto t = table({prefix("/", {}, "api.example.com"), prefix("/", {}, "Admin.Example.COM."), prefix("/x/")});
  for (auto h : {"api.example.com", "API.EXAMPLE.COM", "Api.Example.Com:8080", "api.example.com.", "api.example.com.:443",
                 "api.example.com:"})
    CHECK(t.match(h, "GET", "/") == 0);
  CHECK(t.match("admin.example.com", "GET", "/") == 1);  // route host normalized too
  CHECK(t.match("ADMIN.example.com.:81", "GET", "/") == 1);
  CHECK(t.match("www.example.com", "GET", "/") == -1);
  CHECK(t.match("api.example.co", "GET", "/") == -1);
  CHECK(t.match("xapi.example.com", "GET", "/") == -1);
  CHECK(t.match("api.example.com.evil", "GET", "/") == -1);
  CHECK(t.match("", "GET", "/") == -1);
  // A route without a host matches any host, including none.
  CHECK(t.match("www.example.com", "GET", "/x/1") == 2);
  CHECK(t.match("", "GET", "/x/1") == 2);

  auto v6 = table({prefix("/", {}, "[::1]")});
  CHECK(v6.match("[::1]:8080", "GET", "/") == 0);
  CHECK(v6.match("[::1]", "GET", "/") == 0);
  CHECK(v6.match("[::2]", "GET", "/") == -1);
}

TEST_CASE("route_table: all criteria must hold", "[routing]") {
  auto t = table({exact("/pay", {"POST"}, "shop.example"), prefix("/", {"GET"})});
  CHECK(t.match("shop.example", "POST", "/pay") == 0);
  CHECK(t.match("other.example", "POST", "/pay") == -1);
  CHECK(t.match("shop.example", "GET", "/pay") == 1);
  CHECK(t.match("shop.example", "POST", "/pay/x") == -1);
}

TEST_CASE("normalize_host", "[routing]") {
  CHECK(normalize_host("API.Example.com.:8080") == "api.example.com");
  CHECK(normalize_host("example.com") == "example.com");
  CHECK(normalize_host("Example.COM") == "example.com");
  CHECK(normalize_host("example.com:80") == "example.com");
  CHECK(normalize_host("example.com.") == "example.com");
  CHECK(normalize_host("example.com:") == "example.com");
  CHECK(normalize_host("10.0.0.1:9000") == "10.0.0.1");
  CHECK(normalize_host("[::1]:8080") == "[::1]");
  CHECK(normalize_host("[2001:DB8::1]") == "[2001:db8::1]");
  CHECK(normalize_host("") == "");
  CHECK(normalize_host(".") == "");
  CHECK(normalize_host(":8080") == "");
}

TEST_CASE("normalize_target_path: plain paths and query", "[routing]") {
  CHECK(norm("/") == "/");
  CHECK(norm("/hello") == "/hello");
  CHECK(norm("/hello/") == "/hello/");
  CHECK(norm("/a/b.c/d") == "/a/b.c/d");
  CHECK(norm("/.well-known/x") == "/.well-known/x");
  CHECK(norm("/a/..b/c.") == "/a/..b/c.");
  CHECK(norm("/hello?x=1") == "/hello");
  CHECK(norm("/hello?") == "/hello");
  CHECK(norm("/hello?a=/../b&c=%2e") == "/hello");
  CHECK(norm("/?q") == "/");
}

TEST_CASE("normalize_target_path: dot segments", "[routing]") {
  CHECK(norm("/a/./b") == "/a/b");
  CHECK(norm("/a/../b") == "/b");
  CHECK(norm("/a/b/../../c") == "/c");
  CHECK(norm("/a/.") == "/a/");
  CHECK(norm("/a/..") == "/");
  CHECK(norm("/./") == "/");
  CHECK(norm("/.") == "/");
  CHECK(norm("/a/./b/./c?x") == "/a/b/c");
  // A dot segment ends at the query too; "..." and ".b" are names.
  CHECK(norm("/a/.?x") == "/a/");
  CHECK(norm("/a/..?x=/b") == "/");
  CHECK(norm("/a/...?x") == "/a/...");
  CHECK(norm("/a/.b?x") == "/a/.b");
  CHECK(norm("/a/...") == "/a/...");
  // Percent-encoded dots are dots.
  CHECK(norm("/a/%2e%2e/admin") == "/admin");
  CHECK(norm("/a/%2E%2E/admin") == "/admin");
  CHECK(norm("/a/.%2e/admin") == "/admin");
  CHECK(norm("/a/%2e/b") == "/a/b");
  // ".." cannot climb above the root (Boost.URL alone would keep "/../admin").
  CHECK(norm("/../admin") == "/admin");
  CHECK(norm("/..") == "/");
  CHECK(norm("/../../x/../admin") == "/admin");
  CHECK(norm("/%2e%2e/admin") == "/admin");
  CHECK(norm("/a/b/../../..//c") == "/c");
}

TEST_CASE("normalize_target_path: percent-encoded unreserved characters decoded", "[routing]") {
  CHECK(norm("/hell%6F") == "/hello");
  CHECK(norm("/hell%6f") == "/hello");
  CHECK(norm("/%41") == "/A");
  CHECK(norm("/%7Euser") == "/~user");
  CHECK(norm("/a%2Db%5Fc%2E") == "/a-b_c.");
  CHECK(norm("/%68%65%6C%6C%6F?x=%41") == "/hello");
  // Other octets stay encoded, with hex digits upper-cased by Boost.URL.
  CHECK(norm("/caf%c3%a9") == "/caf%C3%A9");
  CHECK(norm("/a%20b") == "/a%20b");
  CHECK(norm("/100%25") == "/100%25");
  // Boost.URL's normalize_path also decodes "%2F" (it is allowed in a path), so it
  // becomes a segment separator for matching.
  CHECK(norm("/admin%2Fx") == "/admin/x");
  CHECK(norm("/%2Fadmin") == "/admin");

  auto t = table({exact("/hello"), prefix("/admin/")});
  CHECK(route_of(t, "/hell%6F") == 0);
  CHECK(route_of(t, "/%68ello?q=1") == 0);
  CHECK(route_of(t, "/x/../hello") == 0);
  CHECK(route_of(t, "//hello") == 0);
  CHECK(route_of(t, "/hello/") == 0);  // one trailing slash: see "exact vs prefix path"
  CHECK(route_of(t, "/hello/x") == -1);
  CHECK(route_of(t, "//admin//users") == 1);
  CHECK(route_of(t, "/%61dmin/users") == 1);
  CHECK(route_of(t, "/x//../admin/users") == 1);
  CHECK(route_of(t, "/../admin/users") == 1);
}

TEST_CASE("normalize_target_path: repeated slashes merged", "[routing]") {
  CHECK(norm("//hello") == "/hello");
  CHECK(norm("///a//b///c") == "/a/b/c");
  CHECK(norm("/a//") == "/a/");
  CHECK(norm("//") == "/");
  // Slashes are merged before dot segments are removed, like nginx/Apache/Go do:
  // "/x//../admin" is "/admin" there, so it must be "/admin" here too.
  CHECK(norm("/x//../admin") == "/admin");
  CHECK(norm("/x/%2F../admin") == "/admin");
  CHECK(norm("/a//../b") == "/b");
  CHECK(norm("//./hello") == "/hello");
}

TEST_CASE("normalize_target_path: path parameters dropped, as servlet containers do", "[routing]") {
  CHECK(norm("/api/login;x=1") == "/api/login");
  CHECK(norm("/api/login;") == "/api/login");
  CHECK(norm("/api;v=2/login;jsessionid=AB?x=1;y") == "/api/login");
  CHECK(norm("/public/..;/admin") == "/admin");
  CHECK(norm("/public/..;x=y/admin") == "/admin");
  CHECK(norm("/public/.;/admin") == "/public/admin");
  CHECK(norm("/..;/admin") == "/admin");
  CHECK(norm("/;x/admin") == "/admin");
  CHECK(norm("/a/;x/b") == "/a/b");
  CHECK(norm("/;") == "/");
  // Dropped before decoding, as Tomcat does: "%2F" inside a parameter does not end it,
  // and "%3B" is no separator (Boost.URL decodes it: ";" is allowed in a path).
  CHECK(norm("/a;x%2F..%2F../admin") == "/a/admin");
  CHECK(norm("/a%3Bx/b") == "/a;x/b");
  CHECK(norm("http://h/api/login;x=1") == "/api/login");

  auto t = table({exact("/api/login"), prefix("/admin/"), prefix("/public/"), prefix("/")});
  CHECK(route_of(t, "/api/login;x=1") == 0);
  CHECK(route_of(t, "/api/login;jsessionid=1?a=b") == 0);
  CHECK(route_of(t, "/public/..;/admin/users") == 1);
  CHECK(route_of(t, "/public/x;y/z") == 2);
}

TEST_CASE("normalize_target_path: absolute-form", "[routing]") {
  CHECK(norm("http://h/x?y") == "/x");
  CHECK(norm("http://h") == "/");
  CHECK(norm("http://h/") == "/");
  CHECK(norm("http://h:8080/a/b") == "/a/b");
  CHECK(norm("https://h/a/../b") == "/b");
  CHECK(norm("http://h//admin") == "/admin");
  CHECK(norm("http://h/hell%6F") == "/hello");
  CHECK(norm("http://h/../admin") == "/admin");
  CHECK(norm("http://user@h/x") == "/x");
  // Only http and https.
  CHECK(norm("ftp://h/x") == "<invalid>");
  CHECK(norm("mailto:a@b") == "<invalid>");
  CHECK(norm("HTTP://h/x") == "<invalid>");
}

TEST_CASE("normalize_target_path: invalid targets", "[routing]") {
  for (std::string_view t : {"", "*", "hello", "hello/world", "?x", "h:80", "example.com:443"}) {
    INFO("target: " << t);
    std::string out = "unchanged";
    CHECK_FALSE(normalize_target_path(t, out));
  }
  for (std::string_view t : {"/a\\b", "/a\\..\\admin", "\\a", "http://h/a\\b"}) {
    INFO("target: " << t);
    std::string out;
    CHECK_FALSE(normalize_target_path(t, out));
  }
  for (char c : {'\x01', '\x1f', '\x7f', ' ', '\t', '\r', '\n', '\0'}) {
    std::string t = "/a";
    t += c;
    t += "b";
    INFO("control char " << static_cast<int>(c));
    std::string out;
    CHECK_FALSE(normalize_target_path(t, out));
    CHECK_FALSE(normalize_target_path("/%41" + t, out));  // slow path too
    CHECK_FALSE(normalize_target_path("http://h" + t, out));
  }
  std::string out;
  CHECK_FALSE(normalize_target_path("/a\x80" "b", out));
  CHECK_FALSE(normalize_target_path("/a%zz", out));   // bad escape
  CHECK_FALSE(normalize_target_path("/a%4", out));    // truncated escape
  CHECK_FALSE(normalize_target_path("/a%41%", out));  // truncated escape, slow path
  // A fragment is not part of a request target, and Beast does not refuse "#".
  CHECK_FALSE(normalize_target_path("/a#frag", out));
  CHECK_FALSE(normalize_target_path("/public#/../admin", out));
  CHECK_FALSE(normalize_target_path("/a?q#f", out));
  CHECK_FALSE(normalize_target_path("/%41#f", out));
  CHECK_FALSE(normalize_target_path("http://h/a#f", out));
}
