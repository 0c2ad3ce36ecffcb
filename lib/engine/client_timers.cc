#include "engine/client_timers.h"

#include "base/check.h"
#include "engine/client_conn.h"

namespace tern::rpc {

void ClientTimers::place(uint32_t i, ClientConn* c) {
  heap_[i] = c;
  c->timer_pos = i;
}

void ClientTimers::up(uint32_t i) {
  ClientConn* c = heap_[i];
  while (i > 0) {
    const uint32_t parent = (i - 1) / 2;
    if (heap_[parent]->timer_at <= c->timer_at) break;
    place(i, heap_[parent]);
    i = parent;
  }
  place(i, c);
}

void ClientTimers::down(uint32_t i) {
  ClientConn* c = heap_[i];
  const auto n = static_cast<uint32_t>(heap_.size());
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_[child + 1]->timer_at < heap_[child]->timer_at) ++child;
    if (c->timer_at <= heap_[child]->timer_at) break;
    place(i, heap_[child]);
    i = child;
  }
  place(i, c);
}

void ClientTimers::due(ClientConn* c, uint64_t at) {
  if (c->timer_pos != kNotFiled && c->timer_at <= at) return;  // filed by then already: the common case
  file(c, at);
}

void ClientTimers::file(ClientConn* c, uint64_t at) {
  if (at == 0) {
    remove(c);
    return;
  }
  if (c->timer_pos == kNotFiled) {
    c->timer_at = at;
    heap_.push_back(c);
    c->timer_pos = static_cast<uint32_t>(heap_.size() - 1);
    up(c->timer_pos);
    return;
  }
  const uint64_t was = c->timer_at;
  c->timer_at = at;
  if (at < was) up(c->timer_pos);
  else down(c->timer_pos);
}

void ClientTimers::remove(ClientConn* c) {
  const uint32_t i = c->timer_pos;
  if (i == kNotFiled) return;
  TERN_ASSERT(i < heap_.size() && heap_[i] == c, "client timer heap: a connection's place is wrong");
  c->timer_pos = kNotFiled;
  ClientConn* last = heap_.back();
  heap_.pop_back();
  if (last == c) return;
  place(i, last);
  up(i);
  down(last->timer_pos);
}

void ClientTimers::take_due(uint64_t now, std::vector<ClientConn*>* out) {
  while (!heap_.empty() && heap_[0]->timer_at <= now) {
    ClientConn* c = heap_[0];
    out->push_back(c);
    remove(c);
  }
}

uint64_t ClientTimers::first() const { return heap_.empty() ? 0 : heap_[0]->timer_at; }

}  // namespace tern::rpc
