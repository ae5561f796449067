// SPDX-License-Identifier: Apache-2.0
// The /proc tracker and its unit scopes, and the choice between it and the cgroup tracker.
#include "lastcall/process/process_tree.hpp"
#include "process_tree_internal.hpp"

#include "lastcall/core/loop_turn.hpp"

#include <unistd.h>

#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <spdlog/spdlog.h>

namespace lastcall {

using proctree::kill_each;
using proctree::make_cgroup_tracker;

namespace {

// lastcall's own children and the session and process group each was in when last read, shared by
// every ProcScope. A unit's orphans (reparented to lastcall, a subreaper) are found among them by
// session; with a thousand services, lastcall has a thousand children, and reading the stat of each
// for each unit was the stop's quadratic cost (1,000 services: a walk of the whole tree per
// service and pass, 51 s for a stop with a 10 s grace, issue 42). Only a child whose ids match is
// read again, so the answer is as fresh as the read: a cached entry can only be stale for a
// process that has since changed its session or group (setsid, setpgid), which moves it out of
// the unit it was in, never into another; a child is forgotten when it is reaped (reap_all), so a
// reused pid is read afresh. Used from the loop's thread only.
class ChildSessions {
  public:
    static ChildSessions& instance() {
        static ChildSessions sessions;
        return sessions;
    }

    // The live children of lastcall whose session or process group is `id`, read now.
    std::vector<ProcInfo> in_session(pid_t id) {
        std::vector<ProcInfo> out;
        list();
        auto [lo, hi] = by_id_.equal_range(id);
        for (auto it = lo; it != hi; ++it) {
            auto fresh = read_proc_stat(it->second);
            if (!fresh) continue;
            ids_[fresh->pid] = Ids{fresh->sid, fresh->pgid};
            if ((fresh->sid == id || fresh->pgid == id) && is_alive(*fresh))
                out.push_back(std::move(*fresh));
        }
        return out;
    }

    void forget(pid_t pid) { ids_.erase(pid); }

  private:
    // lastcall's children by session and group, listed once per turn of the loop (every time
    // outside one). The kernel's children file costs a walk of the list up to each read's
    // position and a formatted number per child: read by each of 1,000 units, it was half of a
    // stop's time. A child reparented to lastcall later in the same turn is found in the next
    // one, as one reparented while a walk reads the files is (the known limit in docs/design.md).
    void list() {
        std::uint64_t turn = loop_turn();
        if (turn != 0 && turn == listed_turn_) return;
        listed_turn_ = turn;
        by_id_.clear();
        auto children = proctree::children_of(::getpid(), false);
        for (pid_t pid : children) {
            auto it = ids_.find(pid);
            if (it == ids_.end()) {
                auto info = read_proc_stat(pid);
                if (!info) continue;
                it = ids_.emplace(pid, Ids{info->sid, info->pgid}).first;
            }
            by_id_.emplace(it->second.sid, pid);
            if (it->second.pgid != it->second.sid) by_id_.emplace(it->second.pgid, pid);
        }
        // Children are forgotten at their reap; this bounds what another way of reaping (the
        // main child's own waitpid) leaves.
        if (ids_.size() > 2 * children.size() + 64) {
            std::unordered_set<pid_t> live(children.begin(), children.end());
            std::erase_if(ids_, [&](const auto& entry) { return !live.count(entry.first); });
        }
    }

    struct Ids {
        pid_t sid;
        pid_t pgid;
    };
    std::unordered_map<pid_t, Ids> ids_;           // every child of lastcall seen
    std::unordered_multimap<pid_t, pid_t> by_id_;  // session or group -> child, this turn
    std::uint64_t listed_turn_ = 0;
};

// Without cgroups: a unit is its leader's descendants, its session (units are spawned with
// setsid) or process group (probes), and whatever was once seen as a member and is still alive with
// the same start time (an orphan reparented to lastcall is no longer the leader's descendant), plus
// their descendants. A process that both left the session and lost its parent before it was ever
// seen is not attributed to the unit; the whole-tree stop still reaches it.
//
// Found from the unit's own processes, not from a walk of lastcall's whole tree: the leader, the
// members seen last time and lastcall's children in the unit's session (an orphan of the unit is
// reparented to lastcall, and keeps its session), then their descendants. A member that is not
// any of these descends from one of them, so this finds what the whole walk found, at a cost in
// the unit's size and not the tree's.
class ProcScope final : public UnitScope {
  public:
    std::string_view kind() const override { return "proc"; }
    void started(pid_t leader) override { leader_ = sid_ = leader; }

    std::vector<ProcInfo> members() override {
        if (leader_ <= 0) return {};
        if (!proctree::have_proc_children()) return members_of_tree();
        std::vector<ProcInfo> out;
        std::unordered_set<pid_t> chosen;
        auto take = [&](ProcInfo&& p) {
            if (is_alive(p) && chosen.insert(p.pid).second) out.push_back(std::move(p));
        };
        // The leader while it is lastcall's child (its parent until its reap) or a member seen.
        if (auto leader = read_proc_stat(leader_);
            leader && (leader->ppid == ::getpid() || known_.count({leader_, leader->start})))
            take(std::move(*leader));
        for (const auto& [pid, start] : known_) {
            if (chosen.count(pid)) continue;
            if (auto p = read_proc_stat(pid); p && p->start == start) take(std::move(*p));
        }
        for (auto& p : ChildSessions::instance().in_session(sid_)) take(std::move(p));
        // Their descendants, each listed once.
        for (std::size_t i = 0; i < out.size(); ++i) {
            bool single = out[i].threads == 1 && out[i].state != 'Z';
            for (pid_t c : proctree::children_of(out[i].pid, single))
                if (!chosen.count(c))
                    if (auto p = read_proc_stat(c)) take(std::move(*p));
        }
        remember(out);
        return out;
    }

    int kill(const MemberFilter& record) override { return kill_each(members(), record); }

  private:
    // Without the children files: the whole tree's walk, attributed.
    std::vector<ProcInfo> members_of_tree() {
        std::vector<ProcInfo> out;
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
        remember(out);
        return out;
    }

    void remember(const std::vector<ProcInfo>& members) {
        known_.clear();
        for (const auto& p : members) known_.insert({p.pid, p.start});
    }

    pid_t leader_ = -1;
    pid_t sid_ = -1;
    std::set<std::pair<pid_t, unsigned long long>> known_;
};

}  // namespace

namespace proctree {

void forget_child(pid_t pid) {
    ChildSessions::instance().forget(pid);
}

}  // namespace proctree

namespace {

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
