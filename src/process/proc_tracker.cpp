// SPDX-License-Identifier: Apache-2.0
// The /proc tracker and its unit scopes, and the choice between it and the cgroup tracker.
#include "lastcall/process/process_tree.hpp"
#include "process_tree_internal.hpp"

#include <unistd.h>

#include <map>
#include <set>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

namespace lastcall {

using proctree::kill_each;
using proctree::make_cgroup_tracker;

namespace {

// Without cgroups: a unit is its leader's descendants, its session (units are spawned with
// setsid) or process group (probes), and whatever was once seen as a member and is still alive with
// the same start time (an orphan reparented to lastcall is no longer the leader's descendant), plus
// their descendants. A process that both left the session and lost its parent before it was ever
// seen is not attributed to the unit; the whole-tree stop still reaches it.
class ProcScope final : public UnitScope {
  public:
    std::string_view kind() const override { return "proc"; }
    void started(pid_t leader) override { leader_ = sid_ = leader; }

    std::vector<ProcInfo> members() override {
        std::vector<ProcInfo> out;
        if (leader_ <= 0) return out;
        auto tree = descendants_of(::getpid());
        std::map<pid_t, const ProcInfo*> by_pid;
        std::multimap<pid_t, const ProcInfo*> by_parent;
        for (const auto& p : tree) {
            by_pid[p.pid] = &p;
            by_parent.emplace(p.ppid, &p);
        }
        std::set<pid_t> chosen;
        std::vector<pid_t> stack;
        auto take = [&](const ProcInfo& p) {
            if (!chosen.insert(p.pid).second) return;
            out.push_back(p);
            stack.push_back(p.pid);
        };
        if (auto it = by_pid.find(leader_); it != by_pid.end()) take(*it->second);
        // The leader's session (a unit spawned with setsid) or its process group (a probe,
        // spawned as a group leader in lastcall's session): after the leader's reap, the group
        // is how its background children are still found. Neither number can name another
        // process while a member of that session or group lives (the kernel keeps it in use).
        for (const auto& p : tree)
            if (p.sid == sid_ || p.pgid == sid_) take(p);
        for (const auto& [pid, start] : known_)
            if (auto it = by_pid.find(pid); it != by_pid.end() && it->second->start == start)
                take(*it->second);
        while (!stack.empty()) {
            pid_t p = stack.back();
            stack.pop_back();
            auto [lo, hi] = by_parent.equal_range(p);
            for (auto it = lo; it != hi; ++it) take(*it->second);
        }
        known_.clear();
        for (const auto& p : out) known_.insert({p.pid, p.start});
        return out;
    }

    int kill(const MemberFilter& record) override { return kill_each(members(), record); }

  private:
    pid_t leader_ = -1;
    pid_t sid_ = -1;
    std::set<std::pair<pid_t, unsigned long long>> known_;
};

class ProcTracker final : public Tracker {
  public:
    std::string_view name() const override { return "proc"; }
    std::vector<ProcInfo> members() override { return descendants_of(::getpid()); }
    std::vector<ProcInfo> members_within(const std::function<bool()>& out_of_time) override {
        return descendants_of(::getpid(), out_of_time);
    }
    std::vector<ProcInfo> members_listing(const Visit& listed) override {
        return descendants_of(::getpid(), {}, listed);
    }
    Result<std::unique_ptr<UnitScope>> make_scope(const std::string&) override {
        return std::unique_ptr<UnitScope>(new ProcScope);
    }
};

}  // namespace

std::unique_ptr<UnitScope> make_unit_scope(Tracker& tracker, const std::string& unit) {
    auto scope = tracker.make_scope(unit);
    if (scope) return std::move(*scope);
    spdlog::warn("{}: tracking {} by /proc instead", scope.error().message, unit);
    return std::unique_ptr<UnitScope>(new ProcScope);
}

Result<TrackerChoice> make_tracker(TrackerKind kind, const std::string& instance, bool main_leaf) {
    if (kind != TrackerKind::Proc) {
        auto cg = make_cgroup_tracker(instance, main_leaf);
        if (cg) {
            auto reason = kind == TrackerKind::Cgroup ? std::string("requested")
                                                      : std::string("writable cgroup2 hierarchy");
            return TrackerChoice{std::move(*cg), reason};
        }
        if (kind == TrackerKind::Cgroup) return Error{"--tracker cgroup: " + cg.error().message};
        return TrackerChoice{std::make_unique<ProcTracker>(),
                             "no usable cgroup2 (" + cg.error().message + ")"};
    }
    return TrackerChoice{std::make_unique<ProcTracker>(), "requested"};
}

}  // namespace lastcall
