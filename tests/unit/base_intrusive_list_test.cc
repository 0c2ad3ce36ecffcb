// IntrusiveList (lib/base/intrusive_list.h): order after pushes at either
// end, sorted insertion with insert_after, and removal from anywhere in O(1)
// with the neighbours' links and the size kept right.
// And swap: the engine's service list is taken whole at the start of a
// pass this way, so that a connection asking for service during the walk
// waits for the next pass, while one still to be served in this pass stays
// where it is.
#include <gtest/gtest.h>

#include <vector>

#include "base/intrusive_list.h"

namespace tern {
namespace {

struct Item {
  int v = 0;
  ListLink<Item> link;
};
using List = IntrusiveList<Item, &Item::link>;

std::vector<int> forward(const List& l) {
  std::vector<int> out;
  for (Item* x = l.front(); x != nullptr; x = List::next(x)) out.push_back(x->v);
  return out;
}

std::vector<int> backward(const List& l) {
  std::vector<int> out;
  for (Item* x = l.back(); x != nullptr; x = List::prev(x)) out.insert(out.begin(), x->v);
  return out;
}

TEST(IntrusiveList, PushAtBothEnds) {
  Item a{1}, b{2}, c{3};
  List l;
  l.push_back(&b);
  l.push_front(&a);
  l.push_back(&c);
  EXPECT_EQ(forward(l), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(backward(l), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(l.size(), 3u);
  EXPECT_TRUE(List::linked(&b));
}

TEST(IntrusiveList, InsertAfterKeepsASortedList) {
  Item items[6] = {{5}, {1}, {9}, {5}, {0}, {7}};
  List l;
  for (Item& it : items) {
    Item* after = l.back();
    while (after != nullptr && after->v > it.v) after = List::prev(after);
    l.insert_after(after, &it);
  }
  EXPECT_EQ(forward(l), (std::vector<int>{0, 1, 5, 5, 7, 9}));
  EXPECT_EQ(backward(l), forward(l));
  EXPECT_EQ(l.front(), &items[4]);
  EXPECT_EQ(l.back(), &items[2]);
}

TEST(IntrusiveList, RemoveFromAnywhere) {
  Item items[4] = {{1}, {2}, {3}, {4}};
  List l;
  for (Item& it : items) l.push_back(&it);
  l.remove(&items[1]);  // middle
  EXPECT_EQ(forward(l), (std::vector<int>{1, 3, 4}));
  EXPECT_FALSE(List::linked(&items[1]));
  EXPECT_EQ(List::next(&items[1]), nullptr);
  l.remove(&items[3]);  // back
  EXPECT_EQ(l.back(), &items[2]);
  l.remove(&items[0]);  // front
  EXPECT_EQ(l.front(), &items[2]);
  EXPECT_EQ(backward(l), (std::vector<int>{3}));
  EXPECT_EQ(l.pop_front(), &items[2]);
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.size(), 0u);
  EXPECT_EQ(l.back(), nullptr);
}

TEST(IntrusiveListSwap, TradesElementsInOrder) {
  Item n[5];
  for (int i = 0; i < 5; ++i) n[i].v = i;
  List a, b;
  a.push_back(&n[0]);
  a.push_back(&n[1]);
  a.push_back(&n[2]);
  b.push_back(&n[3]);
  a.swap(b);
  EXPECT_EQ(forward(a), (std::vector<int>{3}));
  EXPECT_EQ(forward(b), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b.back(), &n[2]);
  // Both stay whole lists: removal from the middle and the ends, and adds.
  b.remove(&n[1]);
  b.push_back(&n[4]);
  EXPECT_EQ(forward(b), (std::vector<int>{0, 2, 4}));
  a.remove(&n[3]);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.front(), nullptr);
  EXPECT_EQ(a.back(), nullptr);
}

TEST(IntrusiveListSwap, AWalkOverATakenListSeesNoLaterAdds) {
  // The service walk: take the list, pop each; one popped that asks again
  // goes on the main list (next pass); one not yet popped is still linked
  // and is not added twice.
  Item n[3];
  for (int i = 0; i < 3; ++i) n[i].v = i;
  List main;
  for (Item& x : n) main.push_back(&x);
  List pass;
  pass.swap(main);
  EXPECT_TRUE(main.empty());
  std::vector<int> served;
  while (Item* x = pass.pop_front()) {
    served.push_back(x->v);
    if (x->v == 0) {
      if (!List::linked(&n[0])) main.push_back(&n[0]);  // asks again: next pass
      if (!List::linked(&n[2])) main.push_back(&n[2]);  // still in this pass: stays there
    }
  }
  EXPECT_EQ(served, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(forward(main), (std::vector<int>{0}));
}

}  // namespace
}  // namespace tern
