#include "redis/reply_bounds.hpp"

#include <hiredis/read.h>

#include <cstdio>

namespace fg::redis {

namespace {

// Counts one more object of the reply `task` is part of; false past the budget. A
// task with no parent starts a new reply.
bool spend(const redisReadTask* task, std::size_t objects) {
  auto* b = static_cast<reply_budget*>(task->privdata);
  if (!task->parent) b->left = max_reply_objects;
  if (objects > b->left) return false;
  b->left -= objects;
  return true;
}

const redisReplyObjectFunctions* inner(const redisReadTask* task) {
  return static_cast<reply_budget*>(task->privdata)->inner;
}

void* create_string(const redisReadTask* task, char* s, size_t len) {
  return spend(task, 1) ? inner(task)->createString(task, s, len) : nullptr;
}

void* create_array(const redisReadTask* task, int elements) {
  // The array and, to come, its elements: refused before hiredis allocates for them.
  const std::size_t n = elements > 0 ? static_cast<std::size_t>(elements) : 0;
  return spend(task, 1 + n) ? inner(task)->createArray(task, elements) : nullptr;
}

void* create_integer(const redisReadTask* task, long long value) {
  return spend(task, 1) ? inner(task)->createInteger(task, value) : nullptr;
}

void* create_nil(const redisReadTask* task) { return spend(task, 1) ? inner(task)->createNil(task) : nullptr; }

redisReplyObjectFunctions bounded_functions{create_string, create_array, create_integer, create_nil, nullptr};

}  // namespace

void bound_replies(redisReader* r, reply_budget& budget) {
  if (!r || !r->fn || r->fn == &bounded_functions) return;
  budget.inner = r->fn;
  bounded_functions.freeObject = r->fn->freeObject;
  r->fn = &bounded_functions;
  r->privdata = &budget;
}

bool refuse_if_overfull(redisReader* r) {
  if (!r || r->err || r->len - r->pos <= max_reply_buffered) return false;
  r->err = REDIS_ERR_PROTOCOL;
  std::snprintf(r->errstr, sizeof r->errstr, "a reply over %zu MiB", max_reply_buffered >> 20);
  return true;
}

}  // namespace fg::redis
