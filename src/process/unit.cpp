// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/unit.hpp"

#include <algorithm>

namespace lastcall {

std::string_view to_string(UnitState s) {
    switch (s) {
        case UnitState::Running:
            return "running";
        case UnitState::Stopping:
            return "stopping";
        case UnitState::Killed:
            return "killed";
        case UnitState::Gone:
            return "gone";
    }
    return "?";
}

std::optional<UnitState> unit_transition(UnitState from, UnitEvent event) {
    using S = UnitState;
    using E = UnitEvent;
    struct Row {
        S from;
        E event;
        S to;
    };
    static constexpr Row kTable[] = {
        {S::Running, E::Stop, S::Stopping},    {S::Running, E::Kill, S::Killed},
        {S::Stopping, E::Kill, S::Killed},     {S::Running, E::Gone, S::Gone},
        {S::Stopping, E::Gone, S::Gone},       {S::Killed, E::Gone, S::Gone},
        {S::Gone, E::Restart, S::Running},     {S::Running, E::Restart, S::Running},
        {S::Stopping, E::Restart, S::Running}, {S::Killed, E::Restart, S::Running},
    };
    for (const auto& row : kTable)
        if (row.from == from && row.event == event) return row.to;
    return std::nullopt;
}

UnitTree::~UnitTree() {
    for (Unit* u : units_) u->tree_ = nullptr;
}

bool UnitTree::claimed(const ProcInfo& p) const {
    return std::any_of(units_.begin(), units_.end(), [&](const Unit* u) { return u->claims(p); });
}

bool UnitTree::helper_claimed(const ProcInfo& p) const {
    return std::any_of(units_.begin(), units_.end(), [&](const Unit* u) {
        return u->role() == UnitRole::Helper && u->claims(p);
    });
}

bool UnitTree::stop_helper(const ProcInfo& p, std::optional<StopHelpers::Parent> parent) {
    static const StopHelpers::Probes probes{stop_signal_pending,
                                            [](pid_t pid) -> std::optional<unsigned long long> {
                                                if (auto info = read_proc_stat(pid))
                                                    return info->start;
                                                return std::nullopt;
                                            }};
    return birth_line_ && birth_line_->born_after(p) && stop_helpers_.is_helper(p, parent, probes);
}

const Unit* UnitTree::owner_of(const ProcInfo& p) const {
    // By session first, one lookup: in a fork bomb the report labels thousands of processes.
    if (auto it = sessions_.find(p.sid); it != sessions_.end()) return it->second;
    for (const Unit* u : units_)
        if (!u->signalled_.empty() && u->signalled(p)) return u;
    return nullptr;
}

void Unit::set_session(pid_t sid) {
    if (!tree_) return;
    forget_session();
    session_ = sid;
    tree_->sessions_[sid] = this;
}

// Only its own entry: a later unit may have been given the same session id (a reused pid).
void Unit::forget_session() {
    if (auto it = tree_->sessions_.find(session_);
        it != tree_->sessions_.end() && it->second == this)
        tree_->sessions_.erase(it);
}

Unit::Unit(UnitTree& tree, std::string name, const Clock& clock, Members members, Freeze freeze,
           Send send, UnitPolicy policy)
    : Unit(tree, std::move(name), clock,
           MembersWithin([members = std::move(members)](const OutOfTime&) { return members(); }),
           std::move(freeze), std::move(send), std::move(policy)) {}

Unit::Unit(UnitTree& tree, std::string name, const Clock& clock, MembersWithin members,
           Freeze freeze, Send send, UnitPolicy policy)
    : tree_(&tree),
      name_(std::move(name)),
      clock_(clock),
      members_(std::move(members)),
      freeze_(std::move(freeze)),
      send_(std::move(send)),
      policy_(std::move(policy)) {
    // The root is the tree itself, not one of its children: it asks them (claimed), never
    // itself.
    if (policy_.role != UnitRole::Root) tree_->units_.push_back(this);
}

Unit::~Unit() {
    if (!tree_) return;
    std::erase(tree_->units_, this);
    forget_session();
}

bool Unit::apply(UnitEvent e) {
    auto to = unit_transition(state_, e);
    if (!to) return false;
    state_ = *to;
    return true;
}

int Unit::stop(int sig, MonoTime deadline) {
    if (state_ == UnitState::Killed || state_ == UnitState::Gone) return 0;
    sig_ = sig;
    deadline_ = deadline_ ? std::min(*deadline_, deadline) : deadline;
    apply(UnitEvent::Stop);
    // A round cut by its budget goes on where it stopped: what it signalled are members, not
    // processes told before this stop. Only a work unit's helper rule asks (a service's next
    // instance); the others tell helpers by the tree's birth line.
    told_before_.clear();
    if (!rounds_.pending && policy_.role == UnitRole::Work)
        for (const auto& key : signalled_) told_before_.insert(key.first);
    return round();
}

int Unit::continue_stop() {
    if (state_ != UnitState::Stopping || !rounds_.pending) return 0;
    return round();
}

int Unit::round() {
    // The main command's unit has one member, its leader, named by its pidfd: nobody is born
    // into it unseen, so one pass is the whole round (the passes, their budget and the freeze are
    // for scopes whose members fork while they are walked), and its stop signal goes out with
    // nothing else before it: it is on the hot path (issue 18; the rounds' machinery cost it
    // 15-20 us of cold code before the signal, perf trace of pread -> pidfd_send_signal).
    if (policy_.role == UnitRole::Main) {
        last_round_ = StopPassResult{PassEnding::Settled, 0, 1, false};
        for (const auto& p : members_(nullptr))
            if (take(p) && send_(p, sig_)) ++last_round_.signalled;
        return last_round_.signalled;
    }
    OutOfTime budget = rounds_.budget([this] { return clock_.now(); }, deadline_);
    // The root's pass signals all its walk found, past the budget, until the grace ends (see
    // StopPassIo::past_deadline: a 10,000-process walk takes the whole budget); a child unit's
    // pass is cut at its budget: its members are few, and the loop has the other units' stops.
    std::function<bool()> past_deadline;
    if (policy_.role == UnitRole::Root)
        past_deadline = [this] { return deadline_ && clock_.now() >= *deadline_; };
    StopPassIo io{[this, &budget] { return members_(budget); }, send_, budget, freeze_,
                  std::move(past_deadline)};
    last_round_ = send_stop_round(
        io, sig_, [this](const ProcInfo& p) { return take(p); }, rounds_);
    return last_round_.signalled;
}

bool Unit::reaches(const ProcInfo& p) const {
    switch (reach_) {
        case StopReach::Tree:
            return true;
        case StopReach::Group:
            return leader_ > 0 && p.pgid == leader_;
        case StopReach::Leader:
            return leader_ > 0 && p.pid == leader_;
    }
    return true;
}

bool Unit::take(const ProcInfo& p) {
    if (signalled_.count(key_of(p))) return false;
    if (policy_.admits && !policy_.admits(p)) return false;
    if (!reaches(p)) {
        out_of_reach_.insert(p.pid);
        return false;
    }
    // Started by a process told to stop before this stop began (a leftover's cleanup): its
    // helper, which the kill at the end of the grace covers.
    if (told_before_.count(p.ppid) || (!told_before_.empty() && helpers_.count(p.ppid))) {
        helpers_.insert(p.pid);
        return false;
    }
    signalled_.insert(key_of(p));
    return tree_ && tree_->record(p, sig_);
}

void Unit::saw(const std::vector<ProcInfo>& members) {
    last_members_.clear();
    for (const auto& p : members) last_members_.insert(p.pid);
}

void Unit::kill() {
    rounds_.end();  // the kill works on frozen processes; nothing more is owed
    kill_sent_ = true;
    apply(UnitEvent::Kill);
}

void Unit::gone() {
    rounds_.end();
    apply(UnitEvent::Gone);
}

void Unit::restart() {
    if (!signalled_.empty()) {
        std::set<ProcKey> alive;
        for (const auto& p : members_(nullptr)) alive.insert(key_of(p));
        std::erase_if(signalled_, [&](const ProcKey& k) { return !alive.count(k); });
    }
    helpers_.clear();
    told_before_.clear();
    last_members_.clear();
    out_of_reach_.clear();
    rounds_.end();
    deadline_.reset();
    kill_sent_ = false;
    apply(UnitEvent::Restart);
}

bool Unit::claims(const ProcInfo& p) const {
    // lastcall's own helper: its whole session, until it is gone (what it leaves behind is the
    // tree's again).
    if (policy_.role == UnitRole::Helper)
        return state_ != UnitState::Gone && policy_.session > 0 && p.sid == policy_.session;
    if (signalled_.count(key_of(p))) return true;
    // The main command's cleanup helpers are told apart by the tree's birth line (the root's
    // pass), not by parenthood: its children forked before its signal are members to stop.
    if (policy_.role != UnitRole::Work) return false;
    // Born to a process this unit told to stop (or to one of its helpers) once its passes had
    // reached every member: a cleanup helper of the unit's own stop, as the supervisor's birth
    // line tells them apart in the main tree. The tree's pass (at the ordered stop's limit)
    // must not cut the cleanup short; the unit's kill at the end of its grace covers it.
    if (state_ != UnitState::Stopping && state_ != UnitState::Killed) return false;
    // Every member of a unit being stopped is the unit's: signalled by it, one of its helpers
    // (also one whose parent has exited), or one its next round will reach.
    if (last_members_.count(p.pid) || out_of_reach_.count(p.pid)) return true;
    if (rounds_.pending || p.ppid <= 1) return false;
    auto parent = signalled_.lower_bound(ProcKey{p.ppid, 0});
    bool parent_stopping = parent != signalled_.end() && parent->first == p.ppid;
    if (parent_stopping || helpers_.count(p.ppid)) {
        helpers_.insert(p.pid);
        return true;
    }
    return false;
}

}  // namespace lastcall
