// The NFSv3 procedure table and the dispatch through it: one entry per
// procedure of program 100003 version 3 (RFC 1813), at its number -- what
// serves it and whether the reply cache records it. A procedure is added or
// changed here, in its entry, and nowhere else.
//
// The idea is nfsd's (a table per program version instead of a switch, the
// reply cache's treatment a property of the procedure); the shape is
// Tern's. Each entry's function decodes its own arguments and encodes its
// own results, because a procedure may answer later, from a storage or
// caller completion (Nfs3Server::defer), so there is no common "encode
// after the work" step to put in the table; and the results buffer is one
// size for every procedure (the largest, READDIR's or an inline READ's), so
// there is no per-procedure reply size either.
#include "nfs/nfs_program.h"
#include "nfsd/nfs3_op.h"

namespace tern::nfsd {

using nfs::Nfs3Proc;

// Where two procedures share a body (REMOVE and RMDIR, READDIR and
// READDIRPLUS), one function takes what tells them apart as a parameter.
constexpr Nfs3Server::Proc Nfs3Server::kProcs[nfs::kNfs3ProcCount] = {
    {Nfs3Proc::kNull, nullptr, Cache::kNone},
    {Nfs3Proc::kGetattr, [](Nfs3Server& s, Op& op) { return s.proc_getattr(op); }, Cache::kNone},
    // kRecord: the procedures a retransmission must not run again (nfsd's
    // RC_REPLBUFF set). WRITE among them: replaying an old WRITE after a
    // newer one to the same bytes would undo the newer.
    {Nfs3Proc::kSetattr, [](Nfs3Server& s, Op& op) { return s.proc_setattr(op); }, Cache::kRecord},
    {Nfs3Proc::kLookup, [](Nfs3Server& s, Op& op) { return s.proc_lookup(op); }, Cache::kNone},
    {Nfs3Proc::kAccess, [](Nfs3Server& s, Op& op) { return s.proc_access(op); }, Cache::kNone},
    {Nfs3Proc::kReadlink, [](Nfs3Server& s, Op& op) { return s.proc_readlink(op); }, Cache::kNone},
    {Nfs3Proc::kRead, [](Nfs3Server& s, Op& op) { return s.proc_read(op); }, Cache::kNone},
    {Nfs3Proc::kWrite, [](Nfs3Server& s, Op& op) { return s.proc_write(op); }, Cache::kRecord},
    {Nfs3Proc::kCreate, [](Nfs3Server& s, Op& op) { return s.proc_create(op); }, Cache::kRecord},
    {Nfs3Proc::kMkdir, [](Nfs3Server& s, Op& op) { return s.proc_mkdir(op); }, Cache::kRecord},
    {Nfs3Proc::kSymlink, [](Nfs3Server& s, Op& op) { return s.proc_symlink(op); }, Cache::kRecord},
    {Nfs3Proc::kMknod, [](Nfs3Server& s, Op& op) { return s.proc_mknod(op); }, Cache::kRecord},
    {Nfs3Proc::kRemove, [](Nfs3Server& s, Op& op) { return s.proc_remove(op, false); }, Cache::kRecord},
    {Nfs3Proc::kRmdir, [](Nfs3Server& s, Op& op) { return s.proc_remove(op, true); }, Cache::kRecord},
    {Nfs3Proc::kRename, [](Nfs3Server& s, Op& op) { return s.proc_rename(op); }, Cache::kRecord},
    {Nfs3Proc::kLink, [](Nfs3Server& s, Op& op) { return s.proc_link(op); }, Cache::kRecord},
    {Nfs3Proc::kReaddir, [](Nfs3Server& s, Op& op) { return s.proc_readdir(op, false); }, Cache::kNone},
    {Nfs3Proc::kReaddirplus, [](Nfs3Server& s, Op& op) { return s.proc_readdir(op, true); }, Cache::kNone},
    {Nfs3Proc::kFsstat, [](Nfs3Server& s, Op& op) { return s.proc_fsstat(op); }, Cache::kNone},
    {Nfs3Proc::kFsinfo, [](Nfs3Server& s, Op& op) { return s.proc_fsinfo(op); }, Cache::kNone},
    {Nfs3Proc::kPathconf, [](Nfs3Server& s, Op& op) { return s.proc_pathconf(op); }, Cache::kNone},
    // Run again, a COMMIT syncs again: nothing a retransmission could undo.
    {Nfs3Proc::kCommit, [](Nfs3Server& s, Op& op) { return s.proc_commit(op); }, Cache::kNone},
};

void Nfs3Server::serve(rpc::ServerCall* c) {
  static_assert(
      [] {
        for (uint32_t p = 0; p < nfs::kNfs3ProcCount; ++p)
          if (static_cast<uint32_t>(kProcs[p].proc) != p || (kProcs[p].serve == nullptr) != (p == 0)) return false;
        return true;
      }(),
      "kProcs: each procedure at its number, and every one but NULL with a function");
  if (c->proc() >= nfs::kNfs3ProcCount) {  // the engine routes only what attach() registered
    (void)c->reply_error(rpc::AcceptStat::kProcUnavail);
    return;
  }
  const Proc& proc = kProcs[c->proc()];
  st_.calls[c->proc()].add();
  if (proc.serve == nullptr) {  // NULL: no arguments, no results
    (void)c->reply({});
    return;
  }
  follow_table();
  if (c->peer_id() != last_peer_) {
    last_peer_ = std::string(c->peer_id());
    last_addr_ = ClientAddr::from_peer_id(last_peer_);
  }
  Op op(c, last_addr_, res_);
  const bool cached = drc_ != nullptr && proc.cache == Cache::kRecord;
  ReplyKey key;
  op.cached = cached;
  op.key = &key;
  if (cached) {
    key = ReplyKey{std::string(c->peer_id()), c->xid(), c->prog(), c->vers(), c->proc(), drc_->args_digest(c->args())};
    switch (drc_->begin(key, &cached_)) {
      case ReplyCache::Found::kDone:
        st_.drc_replays.add();
        (void)c->reply(cached_);
        return;
      case ReplyCache::Found::kInProgress:
        st_.drc_drops.add();
        c->drop();
        return;
      case ReplyCache::Found::kNew:
        break;
    }
  }
  if (!proc.serve(*this, op)) {
    st_.garbage.add();
    if (cached) drc_->forget(key);
    (void)c->reply_error(rpc::AcceptStat::kGarbageArgs);
    return;
  }
  // Waiting for the device or a job run as the caller: its completion
  // answers it (it may have already, when the storage ran synchronously).
  // A recorded procedure's result goes into the reply cache there too,
  // before its reply leaves (reply_to).
  if (op.pending) return;
  reply_to(c, cached, key, op.w, op.bulk);
}

}  // namespace tern::nfsd
