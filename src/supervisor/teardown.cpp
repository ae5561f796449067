// SPDX-License-Identifier: Apache-2.0
// The stop of the whole tree: the state machine's actions (ShutdownActions), the stop passes over
// the tree with the birth line and the root's record (UnitTree), the force, giving up.
#include "lastcall/supervisor/teardown.hpp"

#include <spdlog/spdlog.h>
#include <algorithm>

#include "lastcall/core/duration.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/supervisor/supervisor.hpp"

namespace lastcall {

namespace {

// A tree of this many processes or more is stopped on the bulk listing: below it the /proc reads
// cost little (~0.2 ms a member on a slow VM), and the report keeps every member's name and
// command line.
constexpr std::size_t kBulkStopMembers = 100;

// A member of the bulk listing: its pid alone, nothing read from /proc.
bool listed_only(const ProcInfo& p) {
    return p.start == 0 && p.state == '?';
}

}  // namespace

Teardown::Teardown(ShutdownConfig config, const Clock& clock, TeardownHost& host,
                   const std::vector<SupervisorComponent*>& components)
    : host_(host),
      clock_(clock),
      components_(components),
      shutdown_(std::move(config), clock_, *this) {}

bool Teardown::record_stop_signal(const ProcInfo& p, int sig) {
    if (shutdown_.state() == State::Running) return true;  // not part of a shutdown's record
    auto& rec = book_.observe(p);
    if (rec.stop_signal) return false;
    rec.stop_signal = sig;
    rec.signalled_at = clock_.now();
    return true;
}

void Teardown::record_force(ForceKind kind, std::string source, int count) {
    if (shutdown_.state() == State::Running) return;
    // Forcing repeats SIGKILL every 100 ms: one fact per source and kind, with the largest count.
    for (auto& f : force_facts_)
        if (f.kind == kind && f.source == source) {
            f.count = std::max(f.count, count);
            return;
        }
    force_facts_.push_back({kind, std::move(source), count, clock_.now()});
}

void Teardown::reaped(const Reaped& r, bool forcing) {
    book_.reaped(r, forcing, clock_.now());
    for (auto* c : components_) c->reaped(r);
}

void Teardown::check_tree_gone() {
    State s = shutdown_.state();
    if (s == State::Running || s == State::Stopped) return;
    // No SIGCHLD may ever come (lastcall ran without a command and nothing was running), and a
    // component may have spawned since the last reap saw none (a scheduled job): ask the kernel
    // directly, without reaping, whether any child is left. lastcall is PID 1 or a subreaper, so
    // every descendant is reparented to it before it dies: no child left means no descendant
    // left. cgroup.events is not waited for: its notification is rate-limited by the kernel and
    // would add milliseconds to every exit.
    if (host_.peek_children() != Children::None) return;
    if (root_unit_) root_unit_->gone();
    shutdown_.on_tree_empty();
}

void Teardown::make_root_unit() {
    // The whole tree: every descendant of lastcall the tracker finds, walked within each round's
    // budget, held still for the passes where that is needed (hold_tree_still), each signal
    // followed by the namespace's last pid (send_stop_and_mark).
    UnitPolicy policy;
    policy.role = UnitRole::Root;
    policy.admits = [this](const ProcInfo& p) { return root_admits(p); };
    root_unit_ = std::make_unique<Unit>(
        units_, "tree", clock_, Unit::MembersWithin([this](const Unit::OutOfTime& out_of_time) {
            return root_members(out_of_time);
        }),
        [this] { return one_hold(hold_tree_still()); },
        [this](const ProcInfo& p, int sig) { return send_stop_and_mark(p, sig); },
        std::move(policy));
}

bool Teardown::root_admits(const ProcInfo& p) {
    if (stop_scope_ == Scope::Group && p.pgid != host_.main_pid()) return false;
    // Born after the stop began to a process that had already been told to stop (or to one of
    // its helpers): a cleanup helper. Not a member to stop; the kill at grace end covers it if it
    // is still there. Born after the line to a process that had not had the stop signal yet (a
    // pre-fork server's worker, forked while the passes had not reached its parent): a member
    // like any other, or it would only ever get the SIGKILL (a forced stop of a tree that
    // obeys SIGTERM).
    if (p.pid != host_.main_pid()) {
        std::optional<StopHelpers::Parent> parent;
        if (const ProcessRecord* rec = book_.find_live(p.ppid))
            parent = StopHelpers::Parent{rec->stop_signal, rec->last_pid_at_stop};
        if (units_.stop_helper(p, parent)) return false;
    }
    // lastcall's own helpers (the pre-stop hook, a job's verify) are not part of what is being
    // stopped: a commit step cut by the tree's SIGTERM would throw away finished work.
    if (units_.helper_claimed(p)) return false;
    // Every process the pass reaches is on the record, signalled or not.
    if (book_.observe(p).stop_signal) return false;  // each process gets the stop signal once
    return !units_.claimed(p);                       // a unit's own stop covers it
}

// The stop signal to a member the passes took, then the last pid handed out: a child with a
// larger pid was born after the signal went out. Read before the signal, a worker a pre-fork
// server forked between the read and the signal was taken for a helper and only ever got the
// SIGKILL (CI under the sanitizers: two workers, a tree that obeys SIGTERM reported forced). A
// fork that the signal finds in progress still completes, with a pid the kernel allocates late
// in it, possibly after this read: StopHelpers takes that child for a member only while its
// parent still has the signal pending (the known limit in docs/design.md).
bool Teardown::send_stop_and_mark(const ProcInfo& p, int sig) {
    // Through the member's pidfd, its identity proved by the namespace's last pid instead of a
    // /proc read where it can be (signal_listed). A member of the bulk listing (its state not
    // read) gets SIGCONT through the same pidfd just before its stop signal, as the main child
    // does: a stopped member must be able to act on the stop signal, and a SIGCONT sent before
    // the stop signal cannot discard a stop that the member's reaction to it queues (the reason
    // a running member gets none after it, send_stop_signal). To a member that is not stopped
    // and has no SIGCONT handler, a SIGCONT does nothing.
    int cont_first = listed_only(p) && needs_sigcont(sig) ? SIGCONT : 0;
    bool sent = host_.signal_listed(p, sig, listed_after_, cont_first);
    if (sent)
        if (auto* rec = book_.find_live(p.pid)) rec->last_pid_at_stop = units_.last_pid();
    return sent;
}

std::vector<ProcInfo> Teardown::root_members(const Unit::OutOfTime& out_of_time) {
    listed_after_ = units_.last_pid();
    pass_follows_whole_pass_ = !std::exchange(round_begins_, false);
    if (bulk_) return bulk_members();
    return host_.tracker().members_within(out_of_time);
}

bool Teardown::bulk_stop_fits() {
    // As PID 1 only: /proc then lists the namespace, so the descendants that left the cgroups
    // are found without a walk of the whole tree (namespace_descendants_outside). No unit but
    // the main command's: a service's, a job run's or a helper's claims are told by session and
    // parent, which the bulk listing does not read. The namespace's last pid must be readable
    // (the identities below rest on it).
    if (stop_scope_ != Scope::Tree || !host_.is_pid1()) return false;
    if (units_.size() != (host_.main_pid() > 0 ? 1U : 0U) || units_.last_pid() <= 0) return false;
    // The /proc tracker's listing costs no more than its walk at any size (namespace_members):
    // the size only decides the records' command lines, from the listing itself.
    if (!host_.tracker().freezes()) return host_.proc_lists_namespace();
    // The birth line, drawn just before, was read before this listing: the first pass may take
    // the listing as its own (bulk_members).
    pid_t before = units_.birth_line() ? units_.birth_line()->last_pid : 0;
    auto pids = host_.tracker().listed_pids();
    if (!pids || pids->size() < kBulkStopMembers) return false;
    if (before > 0) first_listing_ = Listing{std::move(*pids), before};
    return true;
}

bool Teardown::signalled_and_unchanged(const ProcessRecord& r) const {
    return r.stop_signal && !r.status &&
           !pid_handed_out_between(r.pid, bulk_listed_after_, listed_after_);
}

// The whole tree's stop as tini -g and catatonit -g stop it, one signal per member and no /proc
// read, but to each member once and never to a stranger. 10,000 members had cost three /proc
// reads each (the walk's children file and stat, the start-time check of the signal) and a
// fourth for the report (cmdline): 5-7 s of teardown against the peers' 3.5-4.5 s (issue 42).
// Here each pass reads the instance's cgroup.procs; each pid listed there is a member by its pid
// alone, and its signal goes through a pidfd whose identity the namespace's last pid proves
// (signal_listed):
//  - Why a listed pid still names the listed process when its pidfd is opened: the pid names
//    another process only once the namespace has handed it out again, and it hands pids out in
//    increasing order, so such a pid lies between the last pid read before the listing and the
//    one read after the pidfd_open. A freeze of the instance would not prove it: a frozen member
//    still dies of a fatal signal (our own SIGTERM, to a member that does not handle it, kills it
//    frozen; a member whose parent dies may get its PR_SET_PDEATHSIG), a parent that ignores
//    SIGCHLD has such a child reaped by the kernel at once, and a process outside the instance
//    (a `docker exec`) may fork meanwhile. Nor is one needed: a member born during a pass (a
//    pre-fork server's worker) has a pid handed out after the birth line, is read from /proc and
//    judged as before (root_admits), and the passes go on until nobody new is found.
//  - Why no member is signalled twice: a pid the book knows from this listing (a record without
//    a start time, signalled) that was not handed out since names the process signalled then,
//    and is passed over unread; a pid the book knows otherwise (the main child) is read.
//  - What the report loses: such a member is itemised by its pid, its stop signal and how it
//    ended, without its name and command line (reading them is the cost saved).
std::vector<ProcInfo> Teardown::bulk_members() {
    if (bulk_listed_after_ == 0) bulk_listed_after_ = listed_after_;
    if (nobody_new_since_last_listing()) return {};
    last_listing_after_ = listed_after_;
    if (!host_.tracker().freezes()) return namespace_members();
    // Each new member's record without its command line: the report itemises a big tree's
    // members by pid and how each ended (reading their names is the cost saved).
    book_.skip_command_lines();
    // The first pass takes the size check's listing, unless a pid was handed out since.
    std::vector<pid_t> pids;
    if (first_listing_ && first_listing_->listed_after == listed_after_)
        pids = std::move(first_listing_->pids);
    else
        pids = host_.tracker().listed_pids().value_or(std::vector<pid_t>{});
    first_listing_.reset();
    // A member signalled from an earlier listing and still the same process: nothing to read.
    auto signalled_unread = [&](const ProcessRecord& r) {
        return r.start == 0 && signalled_and_unchanged(r);
    };
    pid_t line = units_.birth_line() ? units_.birth_line()->last_pid : 0;
    std::vector<ProcInfo> out;
    out.reserve(pids.size());
    for (pid_t pid : pids) {
        const ProcessRecord* rec = book_.find_live(pid);
        if (rec && signalled_unread(*rec)) continue;
        if (!rec && !(line > 0 && pid_handed_out_between(pid, line, listed_after_))) {
            ProcInfo p;
            p.pid = pid;  // start 0, state '?': listed_only
            out.push_back(std::move(p));
        } else if (auto info = host_.proc_stat(pid); info && is_alive(*info)) {
            out.push_back(std::move(*info));
        }
    }
    if (outside_ == Outside::Due) {
        // Their zombies (exited, not reaped yet) are out of cgroup.procs and still in /proc.
        std::vector<pid_t> known = std::move(pids);  // not looked for outside the cgroups
        for (const auto& r : book_.records())
            if (signalled_unread(r)) known.push_back(r.pid);
        for (auto& p : bulk_outsiders(std::move(known))) out.push_back(std::move(p));
    }
    book_.reserve(out.size());  // their records, made as the pass observes them
    return out;
}

// Whether a bulk pass has nobody left to find: it follows a whole pass of its round (the first
// of a round follows a pass the budget may have cut before it reached everyone), and no pid was
// handed out in the namespace since the last listing (its last pid then was read before that
// listing, and again before this pass: listed_after_), so nobody was born since and everyone
// there was listed then. Listed again anyway, as each pass did, cgroup.procs and /proc (with a
// stat read of each process not yet signalled, for the /proc tracker) were read while the tree
// the first pass had woken died on every CPU: 0.2-0.6 s of a 10,000-process stop each.
bool Teardown::nobody_new_since_last_listing() const {
    return pass_follows_whole_pass_ && listed_after_ > 0 && listed_after_ == last_listing_after_;
}

// The descendants outside the cgroups, for a pass that must list them: all of /proc is read
// (10,000 entries: 90 ms on the VM of bench/results, and a dentry per process that its reap must
// drop), so the first pass lists them, before the signals wake the tree, and a later pass again
// only while the last listing found somebody there not signalled yet (whose children, born
// before its signal, may be outside too). Nobody is missed by that: a descendant
// outside the cgroups at a later pass that the first listing did not show was born after the
// birth line (a helper; or a member whose parent the passes had not reached yet: inside the
// cgroups if that parent is, and listed again if it is outside, as the parent was found there),
// or it left the cgroups after the listing (a privileged write to another cgroup.procs), which
// the kill at grace end covers.
std::vector<ProcInfo> Teardown::bulk_outsiders(std::vector<pid_t> known) {
    auto found = host_.descendants_outside(known);
    bool anyone_new = std::any_of(found.begin(), found.end(), [&](const ProcInfo& p) {
        const ProcessRecord* rec = book_.find_live(p.pid);
        return !rec || !rec->stop_signal;
    });
    outside_ = anyone_new ? Outside::Due : Outside::Done;
    return found;
}

// The /proc tracker as PID 1 of the namespace /proc shows: the passes read each process of the
// namespace once, from one listing of /proc (namespace_descendants_outside), where the walk read
// two files per process per pass (its children file and each child's stat) and a second pass read
// them all again to find nobody new. A process that had its stop signal in an earlier pass and
// whose pid was not handed out since is still that process (pids are handed out in increasing
// order: signal_listed), so it is passed over unread, and its children are still found through
// it. Unlike the cgroup listing, every member is read, so its state is known: a running member
// gets no SIGCONT, and a process entered from outside (`docker exec`, parent 0 here) and its
// children are no members. The main child, signalled before the first pass, is such a record.
std::vector<ProcInfo> Teardown::namespace_members() {
    std::vector<pid_t> known;
    for (const auto& r : book_.records())
        if (signalled_and_unchanged(r)) known.push_back(r.pid);
    auto out = host_.descendants_outside(known);
    // A big tree's records without their command lines (ProcessBook::skip_command_lines),
    // decided before the pass observes anyone.
    if (known.size() + out.size() >= kBulkStopMembers) book_.skip_command_lines();
    return out;
}

void Teardown::state_changed(State from, State to, Event why) {
    spdlog::debug("state {} -> {} ({})", to_string(from), to_string(to), to_string(why));
    // Intake closes before anything else happens in the shutdown: from here on no spawn, run or
    // restart is admitted, so the drain's view of active work can only shrink.
    // Every exit wakes the loop again from here: the shutdown sweeps at each SIGCHLD (after a
    // sweep that reaped a crowd, at the pacer's time: Supervisor::sweep_children).
    if (from == State::Running) {
        host_.admission().close();
        host_.shutdown_begun();
    }
    if (why == Event::HoldExpired)
        spdlog::warn(
            "the ordered stop is past half of the grace: the rest of the tree gets its "
            "stop signal now");
    for (auto* c : components_) c->state_changed(from, to);
    if (to == State::Forcing) force_cause_ = why;
    if (to == State::Forcing)
        record_force(ForceKind::EnteredForcing, std::string(to_string(why)), 0);
    if (why == Event::GiveUp) give_up();
}

// The force limit passed with processes still there: SIGKILL cannot end them (uninterruptible
// sleep, a v1 freezer). lastcall stops waiting, and the record names each of them with what it
// was doing, so the report says what is still running instead of passing them off as killed.
void Teardown::give_up() {
    gave_up_ = true;
    std::string names;
    int survivors = 0;
    for (const ProcInfo& p : host_.tracker().members()) {
        if (p.state == 'Z') continue;  // dead, its parent's to reap: not running
        auto& rec = book_.observe(p);
        rec.survived = ProcessRecord::Survivor{p.state, host_.wchan(p.pid)};
        if (++survivors <= 5)
            names += fmt::format("{}pid {} {} ({}, {})", names.empty() ? "" : ", ", p.pid, p.comm,
                                 p.state, rec.survived->wchan);
    }
    if (survivors > 5) names += fmt::format(" and {} more", survivors - 5);
    record_force(ForceKind::Abandoned, "survived SIGKILL", survivors);
    spdlog::error("{} process(es) survived SIGKILL for {}: giving up on them: {}", survivors,
                  format_duration(ShutdownConfig{}.force_limit), names);
}

void Teardown::signal_tree(int sig) {
    // Stop the units: the main one first (unless the fast path did already), then the root's
    // pass over the rest of the tree. Services (in reverse dependency order) and job runs are
    // stopped by their owners, told by state_changed; the root's pass leaves what their units
    // claim alone.
    Scope scope = host_.effective_scope();
    stop_scope_ = scope;
    auto deadline = shutdown_.next_deadline().value_or(shutdown_.grace_deadline());
    bool main_alive = host_.main_alive();
    int n = host_.main_signalled() ? 1 : 0;
    if (scope == Scope::Child) {
        if (main_alive && host_.stop_main(sig, deadline)) {
            // Its start time for the report, read once the signal is out.
            if (auto info = host_.proc_stat(host_.main_pid())) book_.observe(*info);
            n = 1;
        }
    } else if (host_.peek_children() != Children::None) {
        // With no child left there is no descendant left either (lastcall is PID 1 or a
        // subreaper): the common exit path of a command that left nothing behind skips the
        // enumeration (a read of cgroup.procs, or of all of /proc for the /proc tracker).
        if (main_alive && host_.stop_main(sig, deadline)) n = 1;
        // The birth line, unless the main unit's stop drew it already: from here on, a new
        // process is a helper of the stop.
        if (!units_.has_last_pid_source()) units_.set_last_pid_source(host_.open_last_pid());
        units_.draw_birth_line(units_.read_line());
        bulk_ = bulk_stop_fits();
        round_begins_ = true;
        n += root_unit_->stop(sig, deadline);
        after_root_round();
    }
    spdlog::debug("sent {} to {} process(es) (kill scope {})", signal_name(sig), n,
                  to_string(scope));
    check_tree_gone();
}

void Teardown::after_root_round() {
    // The stop primitive: once to each member, SIGCONT after it, passes until nobody new.
    // No kill(-pgid) first: a process would get it twice. No rescans later: a process born
    // after this is a cleanup helper, and the kill at grace end covers it.
    // A round ends at the grace deadline at the latest: the grace timer must be free to fire.
    if (root_unit_->round_owed()) {
        // The budget ended a pass half-way (the /proc tracker signals a member in about 0.2 ms
        // on a slow machine: a 1,000-process tree's first pass took longer than the budget),
        // and members it had not reached yet would have waited for the kill at grace end
        // without ever getting the stop signal. The loop gets its turn (a second signal, the
        // grace timer), then the passes go on where the record says they stopped: the root's
        // record still gives each process the signal once. The tree stays held meanwhile
        // (the root's rounds), so that no cleanup helper is born to be taken for a member.
        host_.post([this] {
            if (shutdown_.state() != State::Stopping) {
                root_unit_->end_rounds();  // forcing or stopped meanwhile: the kill needs no hold
                return;
            }
            round_begins_ = true;
            int more = root_unit_->continue_stop();
            spdlog::debug("sent {} to {} more process(es)", signal_name(shutdown_.stop_signal()),
                          more);
            after_root_round();
            check_tree_gone();
        });
    } else if (root_unit_->last_round().ending == PassEnding::OutOfPasses) {
        spdlog::warn(
            "processes kept appearing while {} went out: the rest is killed at the end of the "
            "grace",
            signal_name(shutdown_.stop_signal()));
    }
}

void Teardown::kill_tree() {
    // A repeat while the tree collapses is put off, up to a second: 2,000 processes killed at
    // once take the kernel over half a second to end, and a walk of them meanwhile (every
    // 100 ms) competed with their exits for the CPU and kept the loop from reaping them (a fork
    // bomb's force: 0.2-0.5 s longer). Collapsing: a child waits to be reaped, or one was
    // reaped since the last look. Reaping is what shrinks the tree, and the walk after it is
    // short. Not forever: a process outside the killed groups may keep leaving children to reap.
    MonoTime now = clock_.now();
    bool collapsing =
        book_.reaped_count() > reaped_at_last_look_ || host_.peek_children() == Children::Exited;
    reaped_at_last_look_ = book_.reaped_count();
    if (last_kill_walk_ && now - *last_kill_walk_ < std::chrono::seconds(1) && collapsing) return;
    last_kill_walk_ = now;
    for (auto* c : components_) c->before_force(force_cause_);
    // The one kill of the root at the grace: the main unit, lastcall's pre-stop hook and the
    // root are Killed (a round still owed is not: the kill works on frozen processes). Services
    // and job runs mark theirs in before_force.
    std::vector<Unit*> units = host_.own_units();
    units.push_back(root_unit_.get());
    for (Unit* u : units)
        if (u && u->state() != UnitState::Gone) u->kill();
    // With the /proc tracker nothing holds off forks while /proc is walked. Under a fork bomb
    // (2,000 processes of one user retrying fork on 2 cores) lastcall got a sliver of the CPU,
    // one walk took tens of seconds while the bomb refilled what it killed, and lastcall gave up
    // with processes left (58 s in CI). SIGSTOP to the whole groups first (the main child's
    // process group; every process of the namespace as PID 1): in one system call the bulk of
    // the tree stops forking and stops competing for the CPU, so the walk below is short,
    // complete, and names each process before it dies. The cgroup tracker's kill is
    // cgroup.kill, atomic however many members fork: no stop needed.
    //
    // Not killed first: a process that dies before the walk reaches it, reaped by its own
    // parent, would be missing from the record (a fork bomb's report named 1,376 of 1,999).
    Tracker& tracker = host_.tracker();
    auto group = tracker.name() == "proc" ? host_.whole_group_target() : std::nullopt;
    bool held = group && host_.kill(*group, SIGSTOP);
    // A stopped member of the held groups is killed as soon as the walk has named it and listed
    // its children (Tracker::members_listing): the kernel ends the first members while the walk
    // finds the last, where killing the groups after the walk left 2,000 exits (half a second
    // on 2 cores) to start only once the walk (0.1 s) was over. By its pid alone, with one
    // kill(): stopped, it can neither exit nor leave the group, so the pid still names it, and
    // a pidfd_open, a /proc read and a pidfd_send_signal for each of thousands would lengthen
    // the walk. Its children, reparented to lastcall when it dies, are on the walk's list and
    // stopped too. A zombie leader with live threads is signalled through its pidfd.
    auto killed_while_held = [&](const ProcInfo& p) {
        return held && p.state != 'Z' && (*group == -1 || p.pgid == -*group) &&
               host_.kill(p.pid, SIGKILL);
    };
    int killed_held = 0;
    // Whatever the kill scope, the escalation covers the whole tree: lastcall never exits with
    // a descendant left behind. Held, one walk: the group cannot fork, and what a process
    // outside it forks meanwhile gets the next SIGKILL (Forcing repeats it every 100 ms).
    int n = tracker.kill_all(
        [&](const ProcInfo& p) {
            auto& rec = book_.observe(p);
            if (rec.killed) {
                // Killed while held, and still here: slow to die, or not stopped after all (its
                // parent moved it into the group after the stop). One more SIGKILL, through its
                // pidfd, settles either.
                if (std::exchange(rec.killed_by_pid, false)) (void)host_.signal_exact(p, SIGKILL);
                return false;
            }
            rec.killed = true;
            if (!killed_while_held(p)) return true;
            rec.killed_by_pid = true;
            ++killed_held;
            return false;
        },
        held ? 1 : 3);
    n += killed_held;
    // After the walk: the groups' kill reaches what the walk missed (a member stopped above that
    // forked just before the stop), and is the fallback when lastcall has no descriptor left
    // for the walk (RLIMIT_NOFILE lowered under its feet).
    (void)signal_whole_groups(SIGKILL);
    record_force(tracker.name() == "cgroup" ? ForceKind::CgroupKill : ForceKind::Sigkill,
                 "escalation", n);
    if (n > 0) spdlog::warn("sent SIGKILL to {} process(es)", n);
}

FreezeHold Teardown::hold_tree_still() {
    // With a birth line the passes are right without a hold: a process forked while they run is
    // born after the line, a helper the passes leave alone, so one pass reaches every member and
    // the next finds nobody new. Frozen anyway, the main child signalled first would be caught
    // by the freeze on its way into its TERM handler (SIGTERM to the handler: 0.9 ms instead of
    // 0.3). A hold still keeps the passes short when the tree competes for the CPU (below).
    bool crowded = host_.run_queue_crowded();
    if (units_.birth_line() && !crowded) return {};
    if (host_.tracker().freezes()) return host_.tracker().freeze();
    // The /proc tracker's walk competes for the CPU with the tree it walks. Under a fork bomb
    // (2,000 runnable processes on 2 cores) one stop pass took 8 s of a 2 s grace, and the grace
    // timer could not fire while it ran. Then the main group is held with SIGSTOP for the passes:
    // the walk is short and sees a tree that cannot grow. Only then: a parent that waits with
    // WUNTRACED sees the stop (an interactive shell reports its job stopped), which the cgroup
    // freezer never shows.
    if (!crowded) return {};
    auto target = host_.whole_group_target();
    if (!target || !host_.kill(*target, SIGSTOP)) return {};
    spdlog::debug("the run queue is crowded: the tree is held with SIGSTOP for the stop passes");
    return FreezeHold::stopped_group(*target);
}

bool Teardown::signal_whole_groups(int sig) {
    // One system call, and one a racing fork cannot escape: the kernel fails a fork that a group
    // signal interrupts, and the parent retries it only after the signal has acted.
    auto target = host_.whole_group_target();
    return target && host_.kill(*target, sig);
}

void Teardown::forward_extra(int sig) {
    Scope scope = host_.effective_scope();
    host_.forward(sig, scope);
    spdlog::debug("sent {} to the {} (a distinct signal of the stop burst)", signal_name(sig),
                  to_string(scope));
}

}  // namespace lastcall
