#include <gtest/gtest.h>

#include <string>

#include "base/devargs.h"

namespace tern {
namespace {

DevArgs must_parse(const char* spec) {
  Result<DevArgs> r = DevArgs::parse(spec);
  EXPECT_TRUE(r.is_ok()) << spec << ": " << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : DevArgs();
}

TEST(DevArgs, DriverOnly) {
  DevArgs a = must_parse("verbs");
  EXPECT_EQ(a.driver(), "verbs");
  EXPECT_EQ(a.spec(), "verbs");
  EXPECT_FALSE(a.has("dev"));
  EXPECT_EQ(a.get("dev", "none"), "none");
}

TEST(DevArgs, KeyValues) {
  DevArgs a = must_parse("shm:path=/run/tern.sock,depth=128,flag");
  EXPECT_EQ(a.driver(), "shm");
  EXPECT_TRUE(a.has("path"));
  EXPECT_EQ(a.get("path"), "/run/tern.sock");
  EXPECT_EQ(a.get("depth"), "128");
  EXPECT_TRUE(a.has("flag"));
  EXPECT_EQ(a.get("flag", "default"), "");
  EXPECT_FALSE(a.has("pat"));
}

TEST(DevArgs, ValueMayContainEquals) {
  DevArgs a = must_parse("x:opt=a=b");
  EXPECT_EQ(a.get("opt"), "a=b");
}

TEST(DevArgs, DuplicateKeyRejected) {
  Result<DevArgs> r = DevArgs::parse("verbs:port=1,port=2");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'port' given twice"), std::string::npos) << r.status().message();
}

TEST(DevArgs, BadDriverNamesRejected) {
  for (const char* spec : {"", ":path=x", "sh-m", "shm.x:a=1", "a b", "shm/x"}) {
    Result<DevArgs> r = DevArgs::parse(spec);
    EXPECT_FALSE(r.is_ok()) << "'" << spec << "' was accepted";
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), Errc::kInvalidArgument) << spec;
    }
  }
  EXPECT_TRUE(DevArgs::parse("mlx5_dv").is_ok());
}

TEST(DevArgs, EmptyKeyRejected) {
  for (const char* spec : {"shm:=1", "shm:a=1,,b=2", "shm:a=1,=2"}) {
    Result<DevArgs> r = DevArgs::parse(spec);
    EXPECT_FALSE(r.is_ok()) << "'" << spec << "' was accepted";
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("empty key"), std::string::npos) << spec;
    }
  }
}

TEST(DevArgs, GetU64Suffixes) {
  DevArgs a = must_parse("d:a=12,b=4k,c=3M,d=2g,e=0x10,f=8K,g=1G");
  auto v = [&](const char* k) {
    Result<uint64_t> r = a.get_u64(k, 999);
    EXPECT_TRUE(r.is_ok()) << k << ": " << r.status().to_string();
    return r.is_ok() ? *r : 0;
  };
  EXPECT_EQ(v("a"), 12u);
  EXPECT_EQ(v("b"), 4096u);
  EXPECT_EQ(v("c"), 3u << 20);
  EXPECT_EQ(v("d"), 2ull << 30);
  EXPECT_EQ(v("e"), 16u);
  EXPECT_EQ(v("f"), 8192u);
  EXPECT_EQ(v("g"), 1ull << 30);
  EXPECT_EQ(v("absent"), 999u);
}

TEST(DevArgs, GetU64Errors) {
  DevArgs a = must_parse("d:word=abc,trail=12x,two=4kk,empty=,big=99999999999999999999999");
  for (const char* k : {"word", "trail", "two", "empty", "big"}) {
    Result<uint64_t> r = a.get_u64(k, 0);
    EXPECT_FALSE(r.is_ok()) << k << " parsed as " << (r.is_ok() ? *r : 0);
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), Errc::kInvalidArgument);
      EXPECT_NE(r.status().message().find(k), std::string::npos) << r.status().message();
    }
  }
}

TEST(DevArgs, CheckKeysNamesUnknownKey) {
  DevArgs a = must_parse("shm:path=/x,dpeth=4");
  Status s = a.check_keys({"path", "depth"});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), Errc::kInvalidArgument);
  EXPECT_NE(s.message().find("'dpeth'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'shm'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("path, depth"), std::string::npos) << s.message();

  EXPECT_TRUE(must_parse("shm:path=/x,depth=4").check_keys({"path", "depth"}).is_ok());
  EXPECT_TRUE(must_parse("shm").check_keys({}).is_ok());
}

}  // namespace
TEST(DevArgs, GetU64RejectsSignsAndOverflow) {
  DevArgs a = must_parse("shm:neg=-1,plus=+5,big=99999999999g,max=18446744073709551615,huge=18446744073709551616");
  for (const char* k : {"neg", "plus", "big", "huge"}) {
    Result<uint64_t> r = a.get_u64(k, 0);
    EXPECT_FALSE(r.is_ok()) << k << " was accepted as " << (r.is_ok() ? *r : 0);
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), Errc::kInvalidArgument) << k;
    }
  }
  Result<uint64_t> m = a.get_u64("max", 0);
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(*m, UINT64_MAX);
}

}  // namespace tern

