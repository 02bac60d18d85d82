#include <algorithm>

#include "config/duration.hpp"
#include "config/loader_parts.hpp"
#include "util/text.hpp"

// routes[].limits[].plans: a limit's numbers per consumer. The reserved keys say how a
// request's plan is found (from, or consumers with consumer_key and unknown); every other
// key is a plan: `unlimited`, or the algorithm's numbers (what it leaves out is the limit's).
namespace fg::config::detail {

namespace {

// The plans a limit may have: each is a copy of it, a spec of the script.
constexpr std::size_t max_plans = 64;

bool reserved(const std::string& k) { return k == "from" || k == "consumers" || k == "consumer_key" || k == "unknown"; }

// A key source that names one consumer or one plan: not the client's address or global.
bool names_one(const key_source& k) {
  return k.type != key_source::kind::global && k.type != key_source::kind::ip;
}

// One plan: `unlimited`, or a mapping of the algorithm's numbers.
void plan(yaml_reader& r, const YAML::Node& node, const limit_config& base, limit_config& p) {
  if (node.IsScalar()) {
    if (node.Scalar() != "unlimited")
      r.error(node, "plan '" + p.plan + "' must be unlimited or a mapping of " +
                        (rate_based(base) ? "rate and burst" : "limit and window"));
    else p.unlimited = true;
    return;
  }
  yaml_reader::object po(r, node, "plan '" + p.plan + "'");
  if (!po.ok()) return;
  if (rate_based(base)) {
    auto rate_n = po.get("rate"), burst_n = po.get("burst");
    if (present(rate_n)) set(p.rate_, r.parsed<rate>(rate_n, parse_rate, "rate (want e.g. 10/s, 600/m, 1000/h)"));
    if (present(burst_n)) set(p.burst, r.unsigned_int(burst_n, 1, 1'000'000'000));
    else if (present(rate_n)) p.burst = p.rate_.count;  // as for the limit itself
    if (p.cost > p.burst) r.error(node, "plan '" + p.plan + "': cost is larger than burst, so every request would be denied");
  } else {
    auto limit_n = po.get("limit"), window_n = po.get("window");
    if (present(limit_n)) set(p.limit, r.unsigned_int(limit_n, 1, 1'000'000'000));
    if (present(window_n)) {
      if (base.algo == algorithm::concurrency) r.error(window_n, "a concurrency plan sets limit only");
      set(p.window, positive_duration(r, window_n));
    }
    if (p.cost > p.limit) r.error(node, "plan '" + p.plan + "': cost is larger than limit, so every request would be denied");
  }
}

}  // namespace

void load_plans(yaml_reader& r, const YAML::Node& node, limit_config& l) {
  yaml_reader::object o(r, node, "plans");
  if (!o.ok()) return;
  if (!r.within(node, max_plans + 4, "a limit's plans", "entries")) return;
  const auto from_n = o.get("from"), consumers_n = o.get("consumers"), key_n = o.get("consumer_key"),
             unknown_n = o.get("unknown");
  if (present(from_n) == present(consumers_n))
    r.error(node, "plans needs from (a request's plan name, e.g. header:X-Plan) or consumers (a file of "
                  "SHA-256 key digests and their plans), one of them");
  if (present(from_n)) {
    l.choice.how = plan_choice::by::source;
    if (auto k = key_source_of(r, from_n); k && !names_one(*k)) r.error(from_n, "plans.from is a header, query, cookie or client_cert");
    else if (k) l.choice.from = *k;
    if (present(key_n)) r.error(key_n, "plans.consumer_key is read with consumers only");
  }
  if (present(consumers_n)) {
    l.choice.how = plan_choice::by::consumers;
    set(l.choice.consumers, file_path(r, consumers_n));
    if (present(key_n)) {
      if (auto k = key_source_of(r, key_n); k && !names_one(*k)) r.error(key_n, "plans.consumer_key is a header, query, cookie or client_cert");
      else if (k) l.choice.consumer_key = *k;
    } else if (l.key.size() == 1 && names_one(l.key.front())) {
      l.choice.consumer_key = l.key.front();
    } else {
      r.error(consumers_n, "plans.consumers needs consumer_key (whose value is looked up), as the limit's key is "
                           "not one header, query, cookie or client_cert");
    }
  }
  if (present(unknown_n))
    if (auto u = r.one_of(unknown_n, {"default", "reject"})) l.choice.reject_unknown = *u == "reject";
  limit_config base = l;
  base.plans.clear();
  bool has_default = false;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const auto name = it->first.Scalar();
    if (reserved(name)) continue;
    (void)o.get(name);
    if (!util::is_name(name)) {
      r.error(it->first, "invalid plan name '" + name + "' (letters, digits, - _ .)");
      continue;
    }
    limit_config p = base;
    p.plan = name;
    plan(r, it->second, base, p);
    if (name == "default") {
      has_default = true;
      l.choice.default_plan = l.plans.size();
    }
    l.plans.push_back(std::move(p));
  }
  // Without a default plan, the limit's own numbers are it.
  if (!has_default) {
    limit_config p = base;
    p.plan = "default";
    l.choice.default_plan = l.plans.size();
    l.plans.push_back(std::move(p));
  }
  if (l.plans.size() > max_plans) r.error(node, "a limit has at most " + std::to_string(max_plans) + " plans");
}

}  // namespace fg::config::detail
