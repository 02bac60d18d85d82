#include "admin/health_check_client.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <iostream>
#include "util/asio.hpp"

namespace fg::admin {

using util::use_tuple;

using asio::ip::tcp;

boost::system::result<health_url, std::string> parse_health_url(std::string_view text) {
  return net::parse_http_url(text);
}

namespace {

asio::awaitable<health_answer> ask(const health_url& url, asio::steady_timer::time_point deadline,
                                   const admin_request& what) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto [rec, endpoints] = co_await resolver.async_resolve(url.host, url.port, use_tuple);
  if (rec) co_return health_answer{false, "cannot resolve " + url.host + ": " + rec.message()};
  beast::tcp_stream stream(ex);
  stream.expires_at(deadline);
  auto [cec, ep] = co_await stream.async_connect(endpoints, use_tuple);
  if (cec) co_return health_answer{false, "cannot connect to " + url.authority + ": " + cec.message()};

  bhttp::request<bhttp::empty_body> req{what.post ? bhttp::verb::post : bhttp::verb::get, url.target, 11};
  req.set(bhttp::field::host, url.authority);
  req.set(bhttp::field::user_agent, what.post ? "floodgate-reload" : "floodgate-health-check");
  req.set(bhttp::field::connection, "close");
  for (const auto& [name, value] : what.headers) req.set(name, value);
  if (what.post) req.content_length(0);
  auto [wec, wn] = co_await bhttp::async_write(stream, req, use_tuple);
  if (wec) co_return health_answer{false, "cannot send the request: " + wec.message()};

  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 * 1024);
  auto [ec, rn] = co_await bhttp::async_read(stream, buf, parser, use_tuple);
  // A 503 whose body did not arrive whole is still a 503.
  if (ec && !parser.is_header_done()) co_return health_answer{false, "no HTTP answer: " + ec.message()};
  const auto& res = parser.get();
  const unsigned status = res.result_int();
  std::string line = std::to_string(status) + " " + std::string(res.reason());
  // /readyz says why it is not ready in its body: keep its first line.
  std::string_view body = res.body();
  body = body.substr(0, std::min<std::size_t>(body.find('\n'), 300));
  if (!body.empty()) line += ": " + std::string(body);
  co_return health_answer{status >= 200 && status < 300, line};
}

}  // namespace

health_answer check_health(const health_url& url, std::chrono::milliseconds timeout) {
  return ask_admin(url, timeout, {});
}

health_answer ask_admin(const health_url& url, std::chrono::milliseconds timeout, const admin_request& what) {
  asio::io_context ioc;
  const auto deadline = asio::steady_timer::clock_type::now() + timeout;
  std::optional<health_answer> answer;
  auto done = [&answer](std::exception_ptr e, health_answer a) {
    if (e) a = health_answer{false, "the check failed"};
    answer = std::move(a);
  };
  asio::co_spawn(ioc, ask(url, deadline, what), done);
  // The socket's own deadline ends a connect or read; this also bounds name resolution.
  ioc.run_until(deadline);
  if (!answer)
    return health_answer{false, "no answer within " + std::to_string(timeout.count()) + " ms"};
  return *answer;
}

int run_health_check(std::string_view text, std::chrono::milliseconds timeout) {
  auto url = parse_health_url(text);
  if (!url) {
    std::cerr << "floodgate: --health-check " << text << ": " << url.error() << "\n";
    return 1;
  }
  auto answer = check_health(*url, timeout);
  if (!answer.healthy) {
    std::cerr << "floodgate: " << text << ": unhealthy: " << answer.line << "\n";
    return 1;
  }
  std::cout << text << ": " << answer.line << "\n";
  return 0;
}

}  // namespace fg::admin

namespace fg::admin {

int run_reload(const config::config& cfg, std::chrono::milliseconds timeout) {
  if (!cfg.admin.listen) {
    std::cerr << "floodgate: --reload asks the admin listener, and the configuration has no admin.listen "
                 "(send SIGHUP to the process instead; its log says how the reload went)\n";
    return 1;
  }
  // A listener on every address is asked on loopback.
  auto host = cfg.admin.listen->host;
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  else if (host == "::") host = "::1";
  const bool v6 = host.find(':') != std::string::npos;
  const auto port = cfg.admin.listen->port;
  health_url url{.host = host,
                 .port = std::to_string(port),
                 .target = "/reload",
                 .authority = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port),
                 .path_given = true,
                 .port_number = port};
  admin_request what;
  what.post = true;
  if (!cfg.admin.token.empty()) what.headers.emplace_back("Authorization", "Bearer " + cfg.admin.token);
  else what.headers.emplace_back("X-Floodgate-Admin", "1");
  auto answer = ask_admin(url, timeout, what);
  if (!answer.healthy) {
    std::cerr << "floodgate: reload refused or not done: " << answer.line << "\n";
    return 1;
  }
  std::cout << "floodgate: reloaded: " << answer.line << "\n";
  return 0;
}

}  // namespace fg::admin
