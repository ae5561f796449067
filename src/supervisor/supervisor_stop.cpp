// SPDX-License-Identifier: Apache-2.0
// The Supervisor's side of the teardown (TeardownHost): the kernel calls the teardown makes, the
// main child it stops through its pidfd, and the loop it goes on in.
#include "lastcall/supervisor/supervisor.hpp"

#include <signal.h>
#include <unistd.h>

#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"

namespace lastcall {

void Supervisor::post(std::function<void()> task) {
    loop_->post(std::move(task));
}

bool Supervisor::signal_exact(const ProcInfo& p, int sig) {
    return lastcall::signal_exact(p, sig);
}

bool Supervisor::signal_listed(const ProcInfo& p, int sig, pid_t listed_after, int first) {
    return lastcall::signal_listed(p, sig, listed_after, units_.last_pid_fd(), first);
}

bool Supervisor::kill(pid_t target, int sig) {
    return ::kill(target, sig) == 0;
}

std::optional<pid_t> Supervisor::whole_group_target() const {
    // As PID 1 every process of the namespace is part of the tree; otherwise the main child's
    // process group, whose id cannot be reused while the main child is unreaped.
    if (is_pid1()) return -1;
    if (main_pid_ > 0 && !main_status_) return -main_pid_;
    return std::nullopt;
}

bool Supervisor::run_queue_crowded() const {
    return lastcall::run_queue_crowded();
}

std::string Supervisor::wchan(pid_t pid) const {
    return read_wchan(pid);
}

std::optional<ProcInfo> Supervisor::proc_stat(pid_t pid) const {
    return read_proc_stat(pid);
}

bool Supervisor::is_pid1() const {
    return ::getpid() == 1;
}

std::vector<ProcInfo> Supervisor::descendants_outside(const std::vector<pid_t>& listed) {
    return namespace_descendants_outside(listed);
}

bool Supervisor::proc_lists_namespace() const {
    return proc_lists_own_namespace();
}

UniqueFd Supervisor::open_last_pid() {
    return open_ns_last_pid();
}

void Supervisor::shutdown_begun() {
    // Every exit wakes the loop again: the shutdown sweeps at each SIGCHLD.
    end_sweep_pacing();
    watch_tree_events();
}

Scope Supervisor::effective_scope() const {
    // "The child" cannot be signalled once it is gone (or when there is none): then the stop
    // signal goes to what is left of the tree instead of it waiting for SIGKILL.
    Scope scope = opts_.kill_scope;
    if (scope == Scope::Child && (main_status_ || main_pid_ < 0)) scope = Scope::Tree;
    return scope;
}

bool Supervisor::main_alive() const {
    return main_unit_ && main_unit_->state() == UnitState::Running && main_pidfd_;
}

bool Supervisor::main_signalled() const {
    return main_unit_ && main_unit_->signalled_any();
}

std::vector<Unit*> Supervisor::own_units() {
    return {main_unit_.get(), pre_stop_unit_.get()};
}

}  // namespace lastcall
