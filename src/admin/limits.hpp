#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/url/url_view.hpp>

#include "admin/routes.hpp"
#include "admin/status.hpp"

namespace fg::store { class inspector; }

namespace fg::admin {

// GET /limits?route=R&ip=A&header.NAME=V&query.NAME=V&cookie.NAME=V: for each of the
// route's limits, the keys a request with those attributes uses and what the store
// holds for them (remaining, reset, whether the next request is denied), read through
// `inspector` (null: 503) without consuming or writing anything. The configuration is
// status.current_config() at each call. docs/operations.md shows an answer.
boost::asio::awaitable<reply> limits(const status_source& status, store::inspector* inspector,
                                     boost::urls::url_view url);

// POST /limits/reset with the same parameters: the keys of the route's limits for such a
// request are deleted from the store (the consumer starts afresh: a monthly quota given
// back), and every gateway sharing the store forgets its cached denials of them at once.
// `limit=NAME`: that limit only.
boost::asio::awaitable<reply> reset(const status_source& status, store::inspector* inspector,
                                    boost::urls::url_view url);

// POST /limits/grant with the same parameters and `amount=N` (`limit=NAME`: that limit
// only): each of the route's fixed_window, sliding_window, token_bucket and gcra limits
// gives such a request's key back up to N of what it used in its current window (a
// partial reset: never more than was used, nothing for a key not in use), and every
// gateway forgets its cached denials of them. sliding_log and concurrency limits are
// named in `not_granted` (400 when `limit` names one).
boost::asio::awaitable<reply> grant(const status_source& status, store::inspector* inspector,
                                    boost::urls::url_view url);

}  // namespace fg::admin
