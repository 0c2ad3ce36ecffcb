#include "engine/args_digest.h"

namespace tern::rpc {

uint64_t args_digest(const SipKey& key, std::span<const uint8_t> args, std::span<const ReadChunkData> chunks) {
  SipHasher h(key);
  h.update_u64(args.size());
  h.update(args);
  for (const ReadChunkData& c : chunks) {
    h.update_u64(c.data.size());
    h.update(c.data);
  }
  return h.finish();
}

}  // namespace tern::rpc
