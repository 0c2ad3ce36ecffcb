// nfs_opnum4 (RFC 7530 §16): the operations a COMPOUND carries. Only the ones
// Tern's client encodes and decodes are named; the numbers are the RFC's.
#pragma once

#include <cstdint>

namespace tern::nfs {

enum class Op : uint32_t {
  kCommit = 5,
  kGetattr = 9,
  kGetfh = 10,
  kLookup = 15,
  kPutfh = 22,
  kPutrootfh = 24,
  kRead = 25,
  kWrite = 38,
  kIllegal = 10044,  // what a server answers an opcode it does not know with
};

// "PUTROOTFH", "READ", ...; "OP_?" for any other number.
const char* op_name(Op op);

}  // namespace tern::nfs
