// The Network Status Monitor protocol (program 100024 version 1, the
// Open Group XNFS spec): how a lock manager asks the host's rpc.statd to
// watch a client (SM_MON), and what statd calls back on the lock manager's
// own program when that client reboots (the "status" message), and what a
// restarted lock manager sends its clients' statd (SM_NOTIFY). Only the
// procedures tern-nfsd uses.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "../xdr/xdr.h"

namespace tern::nfs::nsm {

inline constexpr uint32_t kProgram = 100024;
inline constexpr uint32_t kVersion = 1;

enum class Proc : uint32_t {
  kNull = 0,
  kStat = 1,
  kMon = 2,
  kUnmon = 3,
  kUnmonAll = 4,
  kSimuCrash = 5,
  kNotify = 6,
};

// SM_MAXSTRLEN.
inline constexpr size_t kMaxName = 1024;
inline constexpr size_t kPrivSize = 16;

// my_id: where statd calls back when the monitored host reboots.
struct MyId {
  std::string_view my_name;  // the lock manager's host; statd calls it there
  uint32_t my_prog = 0;
  uint32_t my_vers = 0;
  uint32_t my_proc = 0;
};

// mon: SM_MON's argument.
struct Mon {
  std::string_view mon_name;  // the host to watch
  MyId my_id;
  uint8_t priv[kPrivSize] = {};  // returned as is in the callback
};
void encode(xdr::XdrWriter& w, const Mon& m);
void encode(xdr::XdrWriter& w, const MyId& id);  // SM_UNMON_ALL's argument

// sm_stat_res: SM_MON's result. res_stat 0 is STAT_SUCC.
struct StatRes {
  uint32_t res_stat = 0;
  int32_t state = 0;
};
bool decode(std::span<const uint8_t> in, StatRes* r);

// status: the callback's argument — mon_name rebooted, its new state.
struct Status {
  std::string_view mon_name;
  int32_t state = 0;
  uint8_t priv[kPrivSize] = {};
};
bool decode(std::span<const uint8_t> in, Status* s);
void encode(xdr::XdrWriter& w, const Status& s);

// stat_chge: SM_NOTIFY's argument, what a restarted host sends the statd of
// each peer it had dealings with -- mon_name (the restarted host, by the
// name the peer knows it by) is now at state.
struct StatChge {
  std::string_view mon_name;
  int32_t state = 0;
};
void encode(xdr::XdrWriter& w, const StatChge& c);
bool decode(std::span<const uint8_t> in, StatChge* c);

}  // namespace tern::nfs::nsm
