// IntrusiveList (lib/base/intrusive_list.h): order after pushes at either
// end, sorted insertion with insert_after, and removal from anywhere in O(1)
// with the neighbours' links and the size kept right.
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

}  // namespace
}  // namespace tern
