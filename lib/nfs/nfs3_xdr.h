// XDR of NFSv3's basic data types (RFC 1813 §2.5, §2.6): file handles,
// attributes, weak cache consistency data, settable attributes, and the
// optional forms (post_op_attr, pre_op_attr, post_op_fh3) most results are
// built from. Decoding follows xdr.h: a failed get marks the reader bad and
// the caller checks ok() once; nothing is allocated.
#pragma once

#include <optional>

#include "nfs3_types.h"
#include "../xdr/xdr.h"

namespace tern::nfs::xdr3 {

// Bytes an encoded fattr3 takes (21 words).
inline constexpr size_t kFattr3Size = 84;
// Bytes a wcc_attr takes (6 words).
inline constexpr size_t kWccAttrSize = 24;

void put_fh(xdr::XdrWriter& w, const Fh3& fh);
// False (and the reader marked bad) for a handle over kFh3Size bytes.
bool get_fh(xdr::XdrReader& r, Fh3* fh);

void put_time(xdr::XdrWriter& w, const NfsTime3& t);
NfsTime3 get_time(xdr::XdrReader& r);

void put_fattr(xdr::XdrWriter& w, const Fattr3& a);
// An ftype3 outside 1..7 marks the reader bad.
bool get_fattr(xdr::XdrReader& r, Fattr3* a);

// post_op_attr: attributes_follow, then fattr3 when it is true.
void put_post_op_attr(xdr::XdrWriter& w, const Fattr3* a);
std::optional<Fattr3> get_post_op_attr(xdr::XdrReader& r);

// wcc_data: pre_op_attr (wcc_attr), post_op_attr. Either may be absent.
void put_wcc(xdr::XdrWriter& w, const WccAttr* before, const Fattr3* after);
struct Wcc {
  std::optional<WccAttr> before;
  std::optional<Fattr3> after;
};
Wcc get_wcc(xdr::XdrReader& r);

// post_op_fh3: handle_follows, then nfs_fh3.
void put_post_op_fh(xdr::XdrWriter& w, const Fh3* fh);
std::optional<Fh3> get_post_op_fh(xdr::XdrReader& r);

// sattr3. A time_how outside 0..2 marks the reader bad.
void put_sattr(xdr::XdrWriter& w, const Sattr3& s);
bool get_sattr(xdr::XdrReader& r, Sattr3* s);

// Verifiers (cookieverf3, createverf3, writeverf3).
void put_verf(xdr::XdrWriter& w, const Verf3& v);
Verf3 get_verf(xdr::XdrReader& r);

}  // namespace tern::nfs::xdr3
