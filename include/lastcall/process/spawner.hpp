// SPDX-License-Identifier: Apache-2.0
// spawn(): fork + exec with everything a supervised child needs set up in between. The "fork"
// is a clone that shares lastcall's memory until the exec where it can (docs/design.md).
//
// Everything that allocates, formats or can take a lock (PATH search, env building, user lookup)
// happens in the parent before fork. Between fork and exec the child makes only
// async-signal-safe system calls; a failure is reported as {stage, errno} over a CLOEXEC pipe and
// the child _exits. The parent learns "exec happened" from EOF on that pipe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/process/credentials.hpp"
#include "lastcall/process/limits.hpp"

namespace lastcall {

enum class SpawnStage : int {
    Setsid,
    Setpgid,
    Cgroup,
    Rlimit,
    OomScoreAdj,
    Chdir,
    Pdeathsig,
    Setgroups,
    Setgid,
    Setuid,
    VerifyIds,
    Capabilities,
    NoNewPrivs,
    Dup,
    CloseFds,
    Exec,
};
const char* to_string(SpawnStage stage);

struct SpawnSpec {
    // argv[0] is looked up in PATH unless it contains a '/'. The lookup happens in the child,
    // after the privilege drop: a unit finds and executes only what its own user could.
    std::vector<std::string> argv;
    std::vector<std::string> env;  // "K=V"; the complete environment of the child
    enum class Session { NewSession, NewGroup, Inherit } session = Session::NewSession;
    bool take_tty = false;  // stdin is a terminal: make it the child's controlling tty
    // The cgroup's directory (O_DIRECTORY): the child is born there (clone3 CLONE_INTO_CGROUP)
    // or moves itself there by a write to its cgroup.procs, before its exec either way.
    int cgroup_fd = -1;
    int pdeathsig = 0;                       // PR_SET_PDEATHSIG, with the getppid() recheck
    std::optional<Credentials> credentials;  // drop_privileges() in the child when set
    bool no_new_privs = false;
    std::string workdir;
    int keep_fds = 0;             // fds 3 .. 3+keep_fds-1 survive (socket activation)
    bool set_listen_pid = false;  // LISTEN_PID=<child pid> is written in the child before exec
    int stdout_fd = -1;           // dup2'ed onto 1 and 2 when >= 0 (hook output capture)
    // null: every disposition default, nothing blocked. Otherwise the child gets this mask and
    // these ignored dispositions (tini passes on what its own parent gave it).
    const InheritedSignals* inherited_signals = nullptr;
    // What lastcall changed of its own inherited limits (process/limits.hpp), given back to the
    // child: every unit, helper and hook by default. null: the child keeps lastcall's.
    const UnitLimits* limits = &unit_limits();
};

struct SpawnFailure {
    SpawnStage stage;
    int err;
    std::string path;
    // What the errno alone hides: the missing interpreter of a script that exists (the kernel
    // says ENOENT for both, and "No such file or directory" read as a missing command).
    std::string detail;
    // 127 for a command that does not exist, 126 for one that cannot be executed, 1 otherwise:
    // the shell's conventions, which every init follows.
    int exit_code() const;
    std::string message() const;
};

struct Spawned {
    pid_t pid = -1;
    UniqueFd pidfd;  // pidfd_open(pid): signalled through it, a reused pid is never hit
};

// The paths execvp would try for argv[0], in order: argv[0] itself when it contains a '/',
// otherwise each PATH entry (or /usr/local/sbin:... when PATH is unset) joined with it. Built in
// the parent; the child tries them after dropping privileges, as execvp does (a missing file
// moves on, a found-but-not-executable one is remembered, any other error stops).
std::vector<std::string> command_candidates(const std::string& name,
                                            const std::vector<std::string>& env);

// fork()s and execs. On failure of any stage in the child, returns the SpawnFailure after the
// failed child has been reaped (it is lastcall's child, so waitpid on it is safe here).
struct SpawnResult {
    std::optional<Spawned> child;
    std::optional<SpawnFailure> failure;
    std::optional<Error> error;  // fork/pipe failed in the parent
};
SpawnResult spawn(const SpawnSpec& spec);

}  // namespace lastcall
