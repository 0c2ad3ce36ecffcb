// apps/option_parser.h: the command-line conventions every Tern program
// shares (docs/tools.md, "Command lines").
#include "option_parser.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace tern::apps {
namespace {

using Outcome = OptionParser::Outcome;

// argv for parse(): argv[0] is the program.
struct Argv {
  std::vector<std::string> s;
  std::vector<char*> p;
  Argv(std::initializer_list<const char*> a) {
    s.emplace_back("prog");
    for (const char* x : a) s.emplace_back(x);
    for (std::string& x : s) p.push_back(x.data());
  }
  int argc() const { return static_cast<int>(p.size()); }
  char* const* argv() const { return p.data(); }
};

// A table like tern-nfsd's and tern-perf's.
struct Table {
  std::string dir, name;
  uint32_t port = 20049, size = 64, engines = 1;
  double seconds = 2;
  bool ro = false, all = false;
  int mode = 0;
  OptionParser p{"prog", "[options]"};
  Table() {
    p.text("export", "DIR", "the directory\nserved to every client", &dir).once();
    p.text("name", "PATH", "the path clients mount", &name);
    p.integer("port", "N", "the port", 1, 65535, &port);
    p.count("size", "BYTES", "message size", 8, 64u << 20, &size).shorthand('s');
    p.integer("engines", "N", "engines", 1, 64, &engines);
    p.duration("seconds", "S", "how long", 1e6, &seconds).shorthand('D');
    p.flag("ro", "read-only", &ro);
    p.flag("all-sizes", "sweep", &all).shorthand('a');
    p.choice("storage", "MODE", "where storage waits", {"auto", "uring", "threads", "sync"}, &mode);
  }
  Outcome parse(std::initializer_list<const char*> a) {
    Argv v(a);
    return p.parse(v.argc(), v.argv());
  }
};

TEST(OptionParser, BothValueFormsGiveTheSameValue) {
  Table a, b;
  ASSERT_EQ(a.parse({"--export=/srv/x", "--port=2049", "--size=4K", "--seconds=500ms"}), Outcome::kRun) << a.p.error();
  ASSERT_EQ(b.parse({"--export", "/srv/x", "--port", "2049", "--size", "4K", "--seconds", "500ms"}), Outcome::kRun)
      << b.p.error();
  for (Table* t : {&a, &b}) {
    EXPECT_EQ(t->dir, "/srv/x");
    EXPECT_EQ(t->port, 2049u);
    EXPECT_EQ(t->size, 4096u);
    EXPECT_DOUBLE_EQ(t->seconds, 0.5);
  }
}

TEST(OptionParser, AValueMayContainAnEqualsSignOrStartWithADash) {
  Table t;
  ASSERT_EQ(t.parse({"--export=/a=b", "--name", "-odd"}), Outcome::kRun) << t.p.error();
  EXPECT_EQ(t.dir, "/a=b");
  EXPECT_EQ(t.name, "-odd");
}

TEST(OptionParser, ShortFormsAttachedSeparateAndBundled) {
  Table t;
  ASSERT_EQ(t.parse({"-s64K", "-D", "3", "-a"}), Outcome::kRun) << t.p.error();
  EXPECT_EQ(t.size, 64u << 10);
  EXPECT_DOUBLE_EQ(t.seconds, 3);
  EXPECT_TRUE(t.all);
  Table u;
  ASSERT_EQ(u.parse({"-as", "128"}), Outcome::kRun) << u.p.error();
  EXPECT_TRUE(u.all);
  EXPECT_EQ(u.size, 128u);
}

TEST(OptionParser, DoubleDashEndsTheOptions) {
  Table t;
  t.p.arguments(0, 3);
  ASSERT_EQ(t.parse({"--ro", "--", "--port", "-s", "x"}), Outcome::kRun) << t.p.error();
  EXPECT_TRUE(t.ro);
  EXPECT_EQ(t.port, 20049u);  // not parsed as an option
  EXPECT_EQ(t.p.args(), (std::vector<std::string>{"--port", "-s", "x"}));
}

TEST(OptionParser, ArgumentsAreRefusedUnlessTheProgramTakesThem) {
  Table t;
  ASSERT_EQ(t.parse({"--ro", "stray"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "unexpected argument 'stray'");
  Table u;
  u.p.arguments(1, 1);
  ASSERT_EQ(u.parse({"--ro"}), Outcome::kUsageError);
  ASSERT_EQ(u.parse({"one", "--ro"}), Outcome::kRun) << u.p.error();
  EXPECT_EQ(u.p.args(), std::vector<std::string>{"one"});
}

TEST(OptionParser, AMistypedOptionGetsTheNearestName) {
  Table t;
  ASSERT_EQ(t.parse({"--exprot=/x"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "unknown option '--exprot'; did you mean '--export'?");
  ASSERT_EQ(t.parse({"--engnes", "2"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "unknown option '--engnes'; did you mean '--engines'?");
  ASSERT_EQ(t.parse({"--all"}), Outcome::kUsageError);  // a prefix is not accepted, but named
  EXPECT_EQ(t.p.error(), "unknown option '--all'; did you mean '--all-sizes'?");
  ASSERT_EQ(t.parse({"-export", "/x"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "unknown option '-export'; did you mean '--export'?");
  ASSERT_EQ(t.parse({"--zzzzzz"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "unknown option '--zzzzzz'");
  ASSERT_EQ(t.parse({"-x"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "unknown option '-x'");
}

TEST(OptionParser, BadNumbersNameTheOptionAndTheRange) {
  Table t;
  ASSERT_EQ(t.parse({"--port", "65536"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "option '--port' expects a whole number in [1, 65535], not '65536'");
  ASSERT_EQ(t.parse({"--port=12ab"}), Outcome::kUsageError);  // atoi would have said 12
  EXPECT_EQ(t.p.error(), "option '--port' expects a whole number in [1, 65535], not '12ab'");
  ASSERT_EQ(t.parse({"--engines", "-1"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "option '--engines' expects a whole number in [1, 64], not '-1'");
  ASSERT_EQ(t.parse({"--engines", "0"}), Outcome::kUsageError);
  ASSERT_EQ(t.parse({"--size", "4"}), Outcome::kUsageError);  // under the minimum
  ASSERT_EQ(t.parse({"--seconds", "0"}), Outcome::kUsageError);
  ASSERT_EQ(t.parse({"--seconds", "2h"}), Outcome::kUsageError);
  ASSERT_EQ(t.parse({"--storage", "fast"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "option '--storage' expects one of auto, uring, threads or sync, not 'fast'");
  ASSERT_EQ(t.parse({"--storage=threads"}), Outcome::kRun);
  EXPECT_EQ(t.mode, 2);
}

TEST(OptionParser, AMissingValueNamesTheOption) {
  Table t;
  ASSERT_EQ(t.parse({"--ro", "--export"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "option '--export' needs a value: DIR, a value");
  ASSERT_EQ(t.parse({"-s"}), Outcome::kUsageError);
  EXPECT_NE(t.p.error().find("'-s' (--size) needs a value"), std::string::npos) << t.p.error();
  ASSERT_EQ(t.parse({"--ro=yes"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "option '--ro' takes no value");
}

TEST(OptionParser, TheLastOfARepeatedOptionWinsUnlessItIsOnce) {
  Table t;
  ASSERT_EQ(t.parse({"--port", "1", "--port=2", "--name", "a", "--name", "b"}), Outcome::kRun) << t.p.error();
  EXPECT_EQ(t.port, 2u);
  EXPECT_EQ(t.name, "b");
  ASSERT_EQ(t.parse({"--export", "/a", "--export=/b"}), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "option '--export' given twice; it takes one DIR");
  // Each parse starts afresh.
  ASSERT_EQ(t.parse({"--export", "/c"}), Outcome::kRun) << t.p.error();
  EXPECT_TRUE(t.p.given("export"));
  EXPECT_FALSE(t.p.given("port"));
}

TEST(OptionParser, HelpAndVersion) {
  Table t;
  EXPECT_EQ(t.parse({"--port", "1", "--help"}), Outcome::kHelp);
  EXPECT_EQ(t.parse({"-h"}), Outcome::kHelp);
  EXPECT_EQ(t.parse({"--version"}), Outcome::kUsageError);  // none declared
  t.p.version("prog 1.0");
  EXPECT_EQ(t.parse({"--version"}), Outcome::kVersion);
  Argv bad({"--hlep"});
  EXPECT_EQ(t.p.parse(bad.argc(), bad.argv()), Outcome::kUsageError);
  EXPECT_EQ(t.p.error(), "unknown option '--hlep'; did you mean '--help'?");
}

TEST(OptionParser, HelpIsGeneratedFromTheTable) {
  Table t;
  t.p.epilogue("Exit: 0 done, 2 usage.");
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  t.p.print_help(f);
  std::fclose(f);
  std::string help(buf, len);
  std::free(buf);
  EXPECT_NE(help.find("usage: prog [options]\n"), std::string::npos) << help;
  // Continuation lines of an option's help are indented to its column.
  EXPECT_NE(help.find("  --export DIR            the directory\n                          served to every client\n"),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("  -s, --size BYTES"), std::string::npos) << help;
  EXPECT_NE(help.find("  -a, --all-sizes"), std::string::npos) << help;
  EXPECT_NE(help.find("Exit: 0 done, 2 usage."), std::string::npos) << help;
}

TEST(OptionParser, RunReturnsTheExitStatus) {
  Table t;
  Argv ok({"--ro"}), bad({"--port", "x"});
  EXPECT_EQ(t.p.run(ok.argc(), ok.argv()), -1);
  EXPECT_EQ(t.p.run(bad.argc(), bad.argv()), 2);
}

TEST(OptionParser, FirstSkipsASubcommand) {
  Table t;
  Argv v({"client", "-s", "256"});
  ASSERT_EQ(t.p.parse(v.argc(), v.argv(), 2), Outcome::kRun) << t.p.error();
  EXPECT_EQ(t.size, 256u);
}

}  // namespace
}  // namespace tern::apps
