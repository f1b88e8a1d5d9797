// The guard's stop loop (proc/tree.hpp) against a fake /proc: a directory written by the test,
// with a fake kill(2) that turns a process into a zombie and hands its children to the
// subreaper, as the kernel does, and a fake reap.
#include "proc/tree.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using rlock::proc::Kernel;

namespace {

// A process tree under a subreaper, kept as files in the layout /proc uses.
class FakeTree {
public:
  explicit FakeTree(long root) : m_root(root) {
    char tmpl[] = "/dev/shm/rlock-fake-proc.XXXXXX";
    m_dir = ::mkdtemp(tmpl);
    add(root, 0);
  }
  ~FakeTree() { fs::remove_all(m_dir); }

  const std::string& dir() const { return m_dir; }

  void add(long pid, long parent, bool zombie = false) {
    m_parent[pid] = parent;
    m_zombie[pid] = zombie;
    fs::create_directories(fs::path(m_dir) / std::to_string(pid) / "task" / std::to_string(pid));
    write_stat(pid);
    if (parent) {
      m_children[parent].push_back(pid);
      write_children(parent);
    }
    write_children(pid);
  }

  long kill(long pid, long sig) {
    if (!m_parent.count(pid)) return -ESRCH;
    signals.push_back({pid, sig});
    if (sig != SIGKILL || m_zombie[pid] || unkillable.count(pid)) return 0;
    m_zombie[pid] = true;
    // Its children go to the subreaper.
    for (long c : m_children[pid]) {
      m_parent[c] = m_root;
      m_children[m_root].push_back(c);
    }
    m_children[pid].clear();
    m_dirty.insert(pid);
    m_dirty.insert(m_root);
    return 0;
  }

  // Reaps one zombie child of the root (-ECHILD when it has none); when none is ready, brings the
  // files up to date (the tree code reads them only after its reaping).
  long reap() {
    auto& mine = m_children[m_root];
    if (mine.empty()) {
      flush();
      return -ECHILD;
    }
    while (m_next_reap < mine.size()) {
      long pid = mine[m_next_reap];
      if (!m_zombie[pid]) {
        ++m_next_reap;
        continue;
      }
      mine.erase(mine.begin() + static_cast<long>(m_next_reap));
      m_parent.erase(pid);
      m_dirty.erase(pid);
      fs::remove_all(fs::path(m_dir) / std::to_string(pid));
      m_dirty.insert(m_root);
      ++reaped;
      return pid;
    }
    flush();
    return 0;
  }

  // Writes the files changed since the last flush.
  void flush() {
    for (long pid : m_dirty) {
      if (!m_parent.count(pid)) continue;
      write_stat(pid);
      write_children(pid);
    }
    m_dirty.clear();
    m_next_reap = 0;
  }

  size_t alive() const {
    size_t n = 0;
    for (const auto& [pid, parent] : m_parent) n += pid != m_root && !m_zombie.at(pid);
    return n;
  }

  // The process group of each process (its own pid unless set).
  long pgid(long pid) const {
    if (!m_parent.count(pid)) return -ESRCH;
    auto g = groups.find(pid);
    return g == groups.end() ? pid : g->second;
  }

  std::vector<std::pair<long, long>> signals;
  std::map<long, long> groups;
  std::set<long> unkillable;  // in an uninterruptible sleep: SIGKILL is taken, but never acted on
  size_t reaped = 0;

private:
  void write_stat(long pid) {
    std::ofstream(fs::path(m_dir) / std::to_string(pid) / "stat")
        << pid << " (w) with) " << (m_zombie[pid] ? 'Z' : 'S') << " " << m_parent[pid] << " 0 0\n";
  }
  void write_children(long pid) {
    std::ofstream out(fs::path(m_dir) / std::to_string(pid) / "task" / std::to_string(pid) / "children");
    for (long c : m_children[pid]) out << c << ' ';
  }

  long m_root;
  std::string m_dir;
  std::map<long, long> m_parent;
  std::map<long, bool> m_zombie;
  std::map<long, std::vector<long>> m_children;
  std::set<long> m_dirty;
  size_t m_next_reap = 0;
};

FakeTree* g_tree = nullptr;

long fake_kill(long pid, long sig) { return g_tree->kill(pid, sig); }
long fake_reap() { return g_tree->reap(); }
long fake_pgid(long pid) { return g_tree->pgid(pid); }
// A clock that moves a millisecond each time it is read.
long g_fake_ns = 0;
long fake_now() { return g_fake_ns += 1'000'000; }
long no_reap() {
  g_tree->flush();
  return 0;
}

Kernel kernel_of(FakeTree& tree, bool reaps = true) {
  g_tree = &tree;
  return Kernel{tree.dir().c_str(), fake_kill, reaps ? fake_reap : no_reap, fake_pgid, fake_now};
}

}  // namespace

TEST(Tree, KillsATreeBiggerThanOnePassWithNoCap) {
  // 3000 children and 2000 grandchildren: more than a pass holds.
  FakeTree tree(1);
  long pid = 100;
  for (int i = 0; i < 3000; ++i) tree.add(pid++, 1);
  for (int i = 0; i < 2000; ++i) tree.add(pid++, 100 + i);
  Kernel k = kernel_of(tree);
  EXPECT_EQ(rlock::proc::kill_descendants(k, 1), 5000);
  EXPECT_EQ(tree.alive(), 0u);
  EXPECT_EQ(tree.reaped, 5000u);
}

// rlock, when the guard was killed, ends the tree that came to it: every process is killed and
// reaped, and it returns once it has no child left.
TEST(Tree, EndTreeKillsAndReapsEveryChild) {
  FakeTree tree(1);
  for (long p : {10, 11, 12}) tree.add(p, 1);
  tree.add(20, 10);
  tree.add(21, 20);
  Kernel k = kernel_of(tree);
  g_fake_ns = 0;
  EXPECT_TRUE(rlock::proc::end_tree(k, 1, 1'000'000'000));
  EXPECT_EQ(tree.alive(), 0u);
  EXPECT_EQ(tree.reaped, 5u);
}

// A process that SIGKILL does not end at once (an uninterruptible sleep) keeps it no longer than
// its deadline, and so does it keep kill_descendants' passes: the others are killed and reaped.
TEST(Tree, AProcessThatDoesNotDieKeepsItOnlyUntilTheDeadline) {
  FakeTree tree(1);
  for (long p : {10, 11}) tree.add(p, 1);
  tree.add(20, 10);
  tree.unkillable.insert(11);
  Kernel k = kernel_of(tree);
  g_fake_ns = 0;
  EXPECT_FALSE(rlock::proc::end_tree(k, 1, 200'000'000));
  EXPECT_GE(g_fake_ns, 200'000'000);
  EXPECT_LT(g_fake_ns, 210'000'000) << "no pass after the deadline";
  EXPECT_EQ(tree.alive(), 1u);
  EXPECT_EQ(tree.reaped, 2u);

  FakeTree other(1);
  other.add(10, 1);
  other.add(11, 10);
  other.unkillable.insert(11);
  k = kernel_of(other, false);
  g_fake_ns = 0;
  EXPECT_GE(rlock::proc::kill_descendants(k, 1, 50'000'000), 2);
  EXPECT_LT(g_fake_ns, 60'000'000);
  EXPECT_EQ(other.alive(), 1u);
}

TEST(Tree, ZombiesNeverHideLiveProcesses) {
  // The bug this guards against: a pass filled with zombies (the killed, not yet reaped) saw
  // none of the live processes behind them and ended while they ran on.
  FakeTree tree(1);
  long pid = 100;
  for (int i = 0; i < 3000; ++i) tree.add(pid++, 1, true);
  tree.add(9000, 1);
  for (int i = 0; i < 500; ++i) tree.add(pid++, 9000);
  Kernel k = kernel_of(tree, false);  // rlock's view: no reaping
  rlock::proc::kill_descendants(k, 1);
  EXPECT_EQ(tree.alive(), 0u);
}

TEST(Tree, APassSignalsOnlyTheLive) {
  FakeTree tree(1);
  tree.add(10, 1);
  tree.add(11, 10, true);
  tree.add(12, 10);
  Kernel k = kernel_of(tree);
  EXPECT_EQ(rlock::proc::signal_pass(k, 1, SIGTERM), 2);
  std::set<long> got;
  for (auto [p, sig] : tree.signals) {
    EXPECT_EQ(sig, SIGTERM);
    got.insert(p);
  }
  EXPECT_EQ(got, (std::set<long>{10, 12}));
  EXPECT_EQ(tree.alive(), 2u);  // TERM kills nothing by itself here
}

TEST(Tree, ACgroupListIsSignalledWhole) {
  FakeTree tree(1);
  for (long p : {20, 21, 22}) tree.add(p, 1);
  std::string procs = tree.dir() + "/cgroup.procs";
  std::ofstream(procs) << "20\n21\n22\n";
  Kernel k = kernel_of(tree);
  int fd = ::open(procs.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(rlock::proc::signal_cgroup(k, fd, SIGKILL), 3);
  ::close(fd);
  EXPECT_EQ(tree.alive(), 0u);
}

TEST(Tree, APassLeavesOutTheGroupSignalledBefore) {
  // The stop signals the child's group (10), then the rest of the tree: each process once.
  FakeTree tree(1);
  tree.add(10, 1);
  tree.add(11, 10);
  tree.add(12, 11);
  tree.groups = {{11, 10}, {12, 12}};
  Kernel k = kernel_of(tree);
  EXPECT_EQ(rlock::proc::signal_pass(k, 1, SIGTERM, 10), 1);
  ASSERT_EQ(tree.signals.size(), 1u);
  EXPECT_EQ(tree.signals[0], (std::pair<long, long>{12, SIGTERM}));
}

TEST(Tree, ACgroupListLeavesOutTheGroupSignalledBefore) {
  FakeTree tree(1);
  for (long p : {20, 21, 22}) tree.add(p, 1);
  tree.groups = {{21, 20}};
  std::string procs = tree.dir() + "/cgroup.procs";
  std::ofstream(procs) << "20\n21\n22\n";
  Kernel k = kernel_of(tree);
  int fd = ::open(procs.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(rlock::proc::signal_cgroup(k, fd, SIGTERM, 20), 1);
  EXPECT_EQ(rlock::proc::signal_cgroup(k, fd, SIGTERM), 3);  // no group signalled before: all
  ::close(fd);
  EXPECT_EQ(tree.signals.front(), (std::pair<long, long>{22, SIGTERM}));
}

// remove_cgroup on plain directories: rmdir(2) refuses a non-empty one (ENOTEMPTY) as it refuses
// a cgroup with cgroups under it (EBUSY); a file stands for a process that keeps a cgroup.
class RemoveCgroup : public ::testing::Test {
protected:
  RemoveCgroup() {
    char tmpl[] = "/dev/shm/rlock-cgroups.XXXXXX";
    m_dir = ::mkdtemp(tmpl);
  }
  ~RemoveCgroup() override { fs::remove_all(m_dir); }
  fs::path path(const std::string& relative) const { return fs::path(m_dir) / relative; }
  long remove(const std::string& relative) const {
    return rlock::proc::remove_cgroup(AT_FDCWD, path(relative).c_str());
  }
  std::string m_dir;
};

TEST_F(RemoveCgroup, RemovesWhatIsUnderItDepthFirst) {
  fs::create_directories(path("rlock.1/rlock.2/sub/deeper"));
  fs::create_directories(path("rlock.1/rlock.2/other"));
  fs::create_directories(path("rlock.1/mine"));
  EXPECT_EQ(remove("rlock.1"), 0);
  EXPECT_FALSE(fs::exists(path("rlock.1")));
}

TEST_F(RemoveCgroup, LeavesWhatHoldsAProcessAndWhatIsAboveIt) {
  fs::create_directories(path("rlock.1/busy"));
  fs::create_directories(path("rlock.1/idle/below"));
  std::ofstream(path("rlock.1/busy/process")) << "1\n";
  EXPECT_NE(remove("rlock.1"), 0);
  EXPECT_TRUE(fs::exists(path("rlock.1/busy/process")));
  EXPECT_FALSE(fs::exists(path("rlock.1/idle")));
}

TEST_F(RemoveCgroup, GoesNoDeeperThanItsBound) {
  std::string chain = "rlock.1";
  for (int i = 0; i < rlock::proc::k_cgroup_depth + 1; ++i) chain += "/d";
  fs::create_directories(path(chain));
  EXPECT_NE(remove("rlock.1"), 0);
  EXPECT_TRUE(fs::exists(path(chain)));
  chain = "rlock.2";
  for (int i = 0; i < rlock::proc::k_cgroup_depth; ++i) chain += "/d";
  fs::create_directories(path(chain));
  EXPECT_EQ(remove("rlock.2"), 0);
}

TEST_F(RemoveCgroup, RemovesNoMoreThanItsCountEachTime) {
  long subs = rlock::proc::k_cgroup_count + 20;
  for (long i = 0; i < subs; ++i) fs::create_directories(path("rlock.1/" + std::to_string(i)));
  EXPECT_NE(remove("rlock.1"), 0);
  long left = std::distance(fs::directory_iterator(path("rlock.1")), fs::directory_iterator());
  EXPECT_EQ(left, subs - (rlock::proc::k_cgroup_count - 1));
  EXPECT_EQ(remove("rlock.1"), 0);  // the next sweep goes on
}

TEST(Tree, ProcIsOursOnlyWhenSelfNamesThisProcess) {
  EXPECT_TRUE(rlock::proc::proc_is_ours("/proc"));
  FakeTree tree(1);
  fs::create_symlink("1", fs::path(tree.dir()) / "self");  // another namespace's pid 1
  EXPECT_FALSE(rlock::proc::proc_is_ours(tree.dir().c_str()));
  EXPECT_FALSE(rlock::proc::proc_is_ours("/nonexistent"));
}
