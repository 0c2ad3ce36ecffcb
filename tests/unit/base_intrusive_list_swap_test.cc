// IntrusiveList::swap (lib/base/intrusive_list.h): the engine's service
// list is taken whole at the start of a pass this way, so that a
// connection asking for service during the walk waits for the next pass,
// while one still to be served in this pass stays where it is.
#include <gtest/gtest.h>

#include <vector>

#include "base/intrusive_list.h"

namespace tern {
namespace {

struct Node {
  int id = 0;
  ListLink<Node> link;
};
using List = IntrusiveList<Node, &Node::link>;

std::vector<int> ids(const List& l) {
  std::vector<int> out;
  for (const Node* n = l.front(); n != nullptr; n = List::next(n)) out.push_back(n->id);
  return out;
}

TEST(IntrusiveListSwap, TradesElementsInOrder) {
  Node n[5];
  for (int i = 0; i < 5; ++i) n[i].id = i;
  List a, b;
  a.push_back(&n[0]);
  a.push_back(&n[1]);
  a.push_back(&n[2]);
  b.push_back(&n[3]);
  a.swap(b);
  EXPECT_EQ(ids(a), (std::vector<int>{3}));
  EXPECT_EQ(ids(b), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b.back(), &n[2]);
  // Both stay whole lists: removal from the middle and the ends, and adds.
  b.remove(&n[1]);
  b.push_back(&n[4]);
  EXPECT_EQ(ids(b), (std::vector<int>{0, 2, 4}));
  a.remove(&n[3]);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.front(), nullptr);
  EXPECT_EQ(a.back(), nullptr);
}

TEST(IntrusiveListSwap, AWalkOverATakenListSeesNoLaterAdds) {
  // The service walk: take the list, pop each; one popped that asks again
  // goes on the main list (next pass); one not yet popped is still linked
  // and is not added twice.
  Node n[3];
  for (int i = 0; i < 3; ++i) n[i].id = i;
  List main;
  for (Node& x : n) main.push_back(&x);
  List pass;
  pass.swap(main);
  EXPECT_TRUE(main.empty());
  std::vector<int> served;
  while (Node* x = pass.pop_front()) {
    served.push_back(x->id);
    if (x->id == 0) {
      if (!List::linked(&n[0])) main.push_back(&n[0]);  // asks again: next pass
      if (!List::linked(&n[2])) main.push_back(&n[2]);  // still in this pass: stays there
    }
  }
  EXPECT_EQ(served, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(ids(main), (std::vector<int>{0}));
}

}  // namespace
}  // namespace tern
