// Names of the enumerations in nfs4_types.h and nfs4_ops.h, for messages.
#include "nfs/nfs4_ops.h"
#include "nfs/nfs4_types.h"

namespace tern::nfs {

const char* file_type_name(FileType t) {
  switch (t) {
    case FileType::kReg: return "regular file";
    case FileType::kDir: return "directory";
    case FileType::kBlk: return "block device";
    case FileType::kChr: return "character device";
    case FileType::kLnk: return "symbolic link";
    case FileType::kSock: return "socket";
    case FileType::kFifo: return "fifo";
    case FileType::kAttrDir: return "named-attribute directory";
    case FileType::kNamedAttr: return "named attribute";
  }
  return "unknown file type";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kCommit: return "COMMIT";
    case Op::kGetattr: return "GETATTR";
    case Op::kGetfh: return "GETFH";
    case Op::kLookup: return "LOOKUP";
    case Op::kPutfh: return "PUTFH";
    case Op::kPutrootfh: return "PUTROOTFH";
    case Op::kRead: return "READ";
    case Op::kWrite: return "WRITE";
    case Op::kIllegal: return "ILLEGAL";
  }
  return "OP_?";
}

}  // namespace tern::nfs
