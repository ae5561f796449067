// SPDX-License-Identifier: Apache-2.0
// How a job run ends (scheduler.hpp): its leader's exit judged once nothing of it runs, verify,
// the output promoted (durably, on the ledger worker's thread), and the final record: completed
// only for a run that ended by itself and whose output is in place, else failed or interrupted.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <cerrno>
#include <cstring>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/jobs/scheduler.hpp"
#include "lastcall/process/spawner.hpp"

namespace lastcall {

namespace {

// A promotion's fsyncs and rename (its budget counts from its start, as a record's).
constexpr Millis kPromoteBudget{30000};

RunOutcome outcome_of(int status) {
    RunOutcome o;
    if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
    return o;
}

// The uid a job's staged output must belong to: the user the job ran as.
uid_t output_owner(const JobSpec& spec) {
    return spec.user ? spec.user->uid : ::geteuid();
}

// The job's staged output, as lastcall (root) may trust it: reached through its directory's
// descriptor, a regular file of the job's own user with a single link. Never a symbolic link,
// a device, a FIFO or a hard link to someone else's file.
struct Staged {
    UniqueFd dir;
    UniqueFd file;
    struct stat st {};
};

Result<Staged> open_staged(uid_t owner, const std::string& staging) {
    auto [dir, name] = split_path(staging);
    Staged out;
    auto dirfd = open_dir_safely(dir);
    if (!dirfd) return dirfd.error();
    out.dir = std::move(*dirfd);
    auto fd = open_owned_regular(out.dir.get(), name, owner, staging, &out.st);
    if (!fd) return fd.error();
    out.file = std::move(*fd);
    return out;
}

Result<Staged> open_staged(const JobSpec& spec, const std::string& staging) {
    return open_staged(output_owner(spec), staging);
}

// The staged output onto its final name, durably: data, then name, then directory, so that after
// a crash the final name holds the previous artifact or this one whole, and `completed` is only
// written once the rename is durable. Exactly the inode that was checked is promoted: it is linked
// under a private name through its descriptor and that name is renamed onto the final one
// (renaming the staging name itself would promote whatever the job's user put there after the
// check). Runs on the ledger worker's thread: its fsyncs wait on the output's disk (an NFS
// volume), never the loop.
Status promote_staged(uid_t owner, const std::string& staging, const std::string& output) {
    // Checked again here, after verify: the job's user may have swapped the file meanwhile.
    auto staged = open_staged(owner, staging);
    if (!staged) return Error{"promote: " + staged.error().message};
    if (::fsync(staged->file.get()) != 0)
        return Error{"promote: " + sys_error("fsync " + staging, errno).message};
    int dir = staged->dir.get();
    std::string final_name = split_path(output).second;
    std::string promoting = "." + final_name + ".lastcall-promote";
    ::unlinkat(dir, promoting.c_str(), 0);  // a leftover of a crash between link and rename
    if (::linkat(staged->file.get(), "", dir, promoting.c_str(), AT_EMPTY_PATH) != 0) {
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc's link to the descriptor does not.
        std::string via = "/proc/self/fd/" + std::to_string(staged->file.get());
        if (::linkat(AT_FDCWD, via.c_str(), dir, promoting.c_str(), AT_SYMLINK_FOLLOW) != 0)
            return Error{"promote: " + sys_error("link " + staging, errno).message};
    }
    if (::renameat(dir, promoting.c_str(), dir, final_name.c_str()) != 0) {
        int err = errno;
        ::unlinkat(dir, promoting.c_str(), 0);
        return Error{"promote: " + sys_error("rename " + staging + " to " + output, err).message};
    }
    // The staging name goes (if it still is the promoted file; anything else there is the
    // job's own business).
    struct stat now {};
    std::string staging_name = split_path(staging).second;
    if (::fstatat(dir, staging_name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_dev == staged->st.st_dev && now.st_ino == staged->st.st_ino)
        ::unlinkat(dir, staging_name.c_str(), 0);
    if (::fsync(dir) != 0)
        return Error{"promote: renamed, but " +
                     sys_error("fsync directory of " + output, errno).message};
    return Ok{};
}

}  // namespace

void JobScheduler::on_leader_exit(Run& run, int status) {
    const JobSpec& spec = jobs_[run.job].spec;
    spdlog::info("job {}: run {} pid {} {}", spec.name, run.id, run.pid,
                 describe_wait_status(status));
    run.leader_status = status;
    // The run is over when its scope is empty, not when its leader is: a background writer
    // (bash's process substitution, `cmd &`) may still be filling the output, which was then
    // promoted and recorded completed and changed afterwards; and a daemon the run left had
    // escaped its timeout. Judged at the last member's reap (release_finished_runs).
    if (!run.recorded) {
        if (auto left = run.scope->members(); !left.empty()) {
            run.phase = Phase::Finishing;
            run.left_behind = run.first == Intervention::None;
            spdlog::info(
                "job {}: run {}: waiting for {} process(es) it left behind; the run "
                "ends with them{}",
                spec.name, run.id, left.size(), spec.timeout ? " or at its timeout" : "");
            return;
        }
    }
    judge(run, false);
}

// The run's ending, from its leader's status and lastcall's interventions, once nothing of it
// runs (verify aside, which comes after).
void JobScheduler::judge(Run& run, bool after_leftovers) {
    const JobSpec& spec = jobs_[run.job].spec;
    int status = run.leader_status;
    run.phase = Phase::Running;
    if (run.recorded) {
        // Interrupted before the SIGKILL: whatever it did after that is not a result, and it is
        // never completed. An `interrupted` that could not be written is tried again.
        if (run.interrupt_pending)
            interrupt(run, outcome_of(status), run.interrupt_reason);
        else
            spdlog::warn(
                "job {}: run {} {} after it was recorded interrupted: refused, the "
                "record stays interrupted",
                spec.name, run.id, after_leftovers ? "ended" : describe_wait_status(status));
        return after_exit(run);
    }
    auto decision =
        decide_run_end(run.first, status, spec.timeout ? format_duration(*spec.timeout) : "",
                       signal_name(host_->stop_signal()), after_leftovers && run.left_behind);
    if (decision.end == RunEnd::Interrupted) {
        interrupt(run, outcome_of(status), decision.reason);
        return after_exit(run);
    }
    if (decision.end == RunEnd::Failed) {
        fail(run, outcome_of(status), decision.reason);
        return after_exit(run);
    }
    if (spec.output.empty()) {
        complete(run);
        return after_exit(run);
    }
    const std::string& staging = run.staging;
    auto staged = open_staged(spec, staging);
    if (!staged) {
        struct stat lst {};
        bool missing = ::lstat(staging.c_str(), &lst) != 0 && errno == ENOENT;
        fail(run, outcome_of(status),
             missing ? "exited 0 but did not write its output ($LASTCALL_OUTPUT " + staging +
                           "): " + std::strerror(ENOENT)
                     : "exited 0 but its output is not promoted: " + staged.error().message);
        return after_exit(run);
    }
    if (staged->st.st_size == 0) {
        fail(run, outcome_of(status), "exited 0 but its output " + staging + " is empty");
        return after_exit(run);
    }
    if (!spec.verify.empty()) return start_verify(run);
    promote(run);
    after_exit(run);
}

void JobScheduler::start_verify(Run& run) {
    const JobSpec& spec = jobs_[run.job].spec;
    const std::string& staging = run.staging;
    SpawnSpec sp;
    sp.argv = spec.verify;
    sp.argv.push_back(staging);
    sp.env = environment(run, staging);
    // Its own session, which the tree's stop signal does not reach: verify is lastcall's commit
    // step, not the work being stopped (it runs under the run's scope, timeout and the final kill).
    sp.session = SpawnSpec::Session::NewSession;
    sp.cgroup_fd = run.scope->spawn_cgroup_fd();
    sp.pdeathsig = SIGKILL;
    sp.credentials = spec.user;  // verify judges the job's output as the job's own user
    sp.no_new_privs = host_->settings().no_new_privs;
    UniqueFd out_write = capture_output(spec.name, sp);
    auto result = host_->spawn(sp);
    out_write.reset();
    if (!result.child) {
        std::string why = result.error ? result.error->message : result.failure->message();
        fail(run, {0, {}}, "verify did not start: " + why);
        return after_exit(run);
    }
    // The verify command runs under the run's ticket and timeout; the loop goes on meanwhile.
    run.phase = Phase::Verifying;
    run.verify_pid = result.child->pid;
    UnitScope* scope = run.scope.get();
    pid_t sid = run.verify_pid;
    run.verify = std::make_unique<Unit>(
        host_->units(), "job " + spec.name + " run " + std::to_string(run.id) + " verify",
        host_->clock(),
        [scope, sid] {
            auto members = scope->members();
            std::erase_if(members, [sid](const ProcInfo& p) { return p.sid != sid; });
            return members;
        },
        Unit::Freeze{}, [this](const ProcInfo& p, int sig) { return host_->signal(p, sig); },
        UnitPolicy{UnitRole::Helper, {}, sid});
    spdlog::info("job {}: run {}: verifying {} (pid {})", spec.name, run.id, staging,
                 run.verify_pid);
}

void JobScheduler::on_verify_exit(Run& run, int status) {
    const JobSpec& spec = jobs_[run.job].spec;
    // What verify left behind in its session is the tree's to stop from here on.
    if (run.verify) run.verify->gone();
    run.verify.reset();
    run.phase = Phase::Running;  // after_exit() moves it on
    if (run.recorded) {
        spdlog::warn(
            "job {}: run {}: verify {} after the run was recorded interrupted; the "
            "output is not promoted",
            spec.name, run.id, describe_wait_status(status));
        return after_exit(run);
    }
    if (run.first == Intervention::Timeout) {
        fail(run, {0, {}},
             "timeout: ran past its " + format_duration(*spec.timeout) + " timeout in verify (" +
                 describe_wait_status(status) + ")");
        return after_exit(run);
    }
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fail(run, {0, {}},
             "verify " + describe_wait_status(status) + "; staged output kept at " + run.staging +
                 " until the next run");
        return after_exit(run);
    }
    promote(run);
    after_exit(run);
}

void JobScheduler::promote(Run& run) {
    const JobSpec& spec = jobs_[run.job].spec;
    // Only a run that ended by itself is promoted (on_leader_exit and on_verify_exit decide).
    if (run.first != Intervention::None || run.interrupt_pending)
        return fail(run, {0, {}}, "not promoted: lastcall intervened in the run");
    // Its ending is decided here: completed once promoted, failed if the promotion fails. Nothing
    // after this (the shutdown's kill of what is left) changes it.
    run.recorded = true;
    std::int64_t id = run.id;
    unconfirmed_.insert(id);  // its lease is renewed until its record lands
    std::string name = spec.name, staging = run.staging, output = spec.output;
    uid_t owner = output_owner(spec);
    ledger_->record<Ok>(
        "promote the output of run " + std::to_string(id), kPromoteBudget,
        [owner, staging, output](Ledger&) { return promote_staged(owner, staging, output); },
        [this, id, name, output](Status promoted) {
            if (!promoted) return record_failed(id, name, {0, {}}, promoted.error().message);
            record_completed(id, name, ", output promoted to " + output);
        });
}

void JobScheduler::complete(Run& run) {
    const JobSpec& spec = jobs_[run.job].spec;
    // Reached only after the promotion (or without output): the rules' last word.
    if (!may_complete(run.first, run.interrupt_pending, !spec.output.empty(), true)) {
        spdlog::error("job {}: run {}: not completed: lastcall intervened in it", spec.name,
                      run.id);
        return;
    }
    run.recorded = true;
    record_completed(run.id, spec.name,
                     spec.output.empty() ? "" : ", output promoted to " + spec.output);
}

void JobScheduler::record_completed(std::int64_t id, const std::string& name,
                                    const std::string& promoted) {
    queue_ending(
        Ledger::Ending{id, RunState::Completed, {0, {}}, "", std::nullopt},
        [this, id, name, promoted](Result<bool> done) {
            if (!done) {
                // Unknown or failed: reported uncertain and written again, never dropped.
                note_unwritten(id, name, RunState::Completed, {0, {}}, "", done.error().message);
                spdlog::error("job {}: run {} completed but not recorded: {}", name, id,
                              done.error().message);
            } else if (!*done) {
                spdlog::warn(
                    "job {}: run {}: `completed` refused, the run already has a final state", name,
                    id);
            } else {
                spdlog::info("job {}: run {} completed{}", name, id, promoted);
            }
        });
}

void JobScheduler::fail(Run& run, RunOutcome outcome, const std::string& reason) {
    run.recorded = true;
    record_failed(run.id, jobs_[run.job].spec.name, outcome, reason);
}

void JobScheduler::record_failed(std::int64_t id, const std::string& name, RunOutcome outcome,
                                 const std::string& reason) {
    finish_record(id, name, RunState::Failed, outcome, reason,
                  [this, id, name, outcome, reason](Result<bool> done) {
                      if (!done) {
                          note_unwritten(id, name, RunState::Failed, outcome, reason,
                                         done.error().message);
                          spdlog::error("job {}: run {} failed ({}) but not recorded: {}", name, id,
                                        reason, done.error().message);
                      } else if (!*done) {
                          spdlog::warn(
                              "job {}: run {}: `failed` ({}) refused, the run already has a "
                              "final state",
                              name, id, reason);
                      } else {
                          spdlog::warn("job {}: run {} failed: {}", name, id, reason);
                      }
                  });
}

}  // namespace lastcall
