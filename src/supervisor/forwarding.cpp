// SPDX-License-Identifier: Apache-2.0
#include "lastcall/supervisor/forwarding.hpp"

#include "lastcall/core/log.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <spdlog/spdlog.h>
#include <cerrno>
#include <cstring>

#include "lastcall/core/signals.hpp"
#include "lastcall/process/process_tree.hpp"

namespace lastcall {

namespace {

int rewritten(const Options& o, int received) {
    auto it = o.rewrite.find(received);
    return it == o.rewrite.end() ? received : it->second;
}

}  // namespace

SignalAction ForwardingPolicy::decide(int received) {
    SignalAction a;
    a.received = received;
    // dumb-init's hand-off: the kernel's SIGHUP and SIGCONT that follow lastcall's TIOCNOTTY.
    if (received == SIGHUP && ignore_hup_) {
        ignore_hup_ = false;
        a.handoff_echo = true;
        return a;
    }
    if (received == SIGCONT && ignore_cont_) {
        ignore_cont_ = false;
        a.handoff_echo = true;
        return a;
    }
    a.sig = rewritten(opts_, received);
    // dumb-init stops itself after any received TSTP/TTIN/TTOU, whatever it forwarded for it, so
    // that the shell that started it sees a stopped job.
    a.stop_self = opts_.compat == CompatMode::DumbInit && is_job_control_signal(received);
    if (a.sig == 0) return a;
    // The meaning is the rewritten signal's: TTIN rewritten to TERM is a termination request.
    if (is_termination_signal(a.sig) && !opts_.forward_termination) {
        a.kind = SignalAction::Kind::Shutdown;
        return a;
    }
    switch (opts_.compat) {
        case CompatMode::Tini:
            // tini ignores TTIN and TTOU (so that writing to a terminal it no longer controls
            // never stops it) and forwards everything else, unchanged, to the child or group.
            if (a.sig == SIGTTIN || a.sig == SIGTTOU) return a;
            a.kind = SignalAction::Kind::Forward;
            a.scope = opts_.forward_to;
            return a;
        case CompatMode::DumbInit:
            a.kind = SignalAction::Kind::Forward;
            a.scope = opts_.forward_to;
            return a;
        case CompatMode::None:
            break;
    }
    if (is_job_control_signal(a.sig)) {
        a.kind = SignalAction::Kind::Suspend;
        return a;
    }
    a.kind = SignalAction::Kind::Forward;
    a.scope = a.sig == SIGCONT ? Scope::Group : opts_.forward_to;
    return a;
}

bool PeerVoice::signal(const SignalAction& a) const {
    switch (opts_.compat) {
        case CompatMode::None:
            return false;
        case CompatMode::Tini:
            // Asked first: the argument is evaluated before debug() checks the level, and
            // strsignal() goes through gettext (its locale lookup was on every forward's path,
            // ahead of the signal itself).
            if (a.kind == SignalAction::Kind::Forward &&
                peer_log().should_log(spdlog::level::debug))
                peer_log().debug("Passing signal: '{}'", ::strsignal(a.sig));
            return true;
        case CompatMode::DumbInit:
            peer_log().debug("Received signal {}.", a.received);
            if (a.handoff_echo) {
                peer_log().debug("Ignoring tty hand-off signal {}.", a.received);
                return true;
            }
            if (a.sig != a.received)
                peer_log().debug("Translating signal {} to {}.", a.received, a.sig);
            if (a.kind == SignalAction::Kind::Forward)
                peer_log().debug("Forwarded signal {} to children.", a.sig);
            else if (a.sig == 0)
                // dumb-init names the signal it would have sent: the rewritten one, 0.
                peer_log().debug("Not forwarding signal {} to children (ignored).", a.sig);
            if (a.stop_self) peer_log().debug("Suspending self due to TTY signal.");
            return true;
    }
    return false;
}

void PeerVoice::sigchld() const {
    if (opts_.compat == CompatMode::Tini) peer_log().debug("Received SIGCHLD");
    if (opts_.compat == CompatMode::DumbInit) peer_log().debug("Received signal {}.", SIGCHLD);
}

bool PeerVoice::spawned(pid_t pid, const std::string& argv0) const {
    if (opts_.compat == CompatMode::Tini)
        peer_log().info("Spawned child process '{}' with pid '{}'", argv0, pid);
    else if (opts_.compat == CompatMode::DumbInit)
        peer_log().debug("Child spawned with PID {}.", pid);
    return compat();
}

bool PeerVoice::exec_failed(const std::string& argv0, int err) const {
    // Both peers print this from the forked child, so tini's line carries the child's pid;
    // lastcall resolves the command before forking, and its line carries lastcall's.
    if (opts_.compat == CompatMode::Tini)
        peer_log().critical("exec {} failed: {}", argv0, std::strerror(err));
    else if (opts_.compat == CompatMode::DumbInit)
        peer_log().critical("{}: {}", argv0, std::strerror(err));
    return compat();
}

bool PeerVoice::reaped(pid_t pid, int status, bool main_child) const {
    switch (opts_.compat) {
        case CompatMode::None:
            return false;
        case CompatMode::Tini:
            peer_log().debug("Reaped child with pid: '{}'", pid);
            if (main_child) {
                if (WIFEXITED(status))
                    peer_log().info("Main child exited normally (with status '{}')",
                                    WEXITSTATUS(status));
                else if (WIFSIGNALED(status))
                    peer_log().info("Main child exited with signal (with signal '{}')",
                                    ::strsignal(WTERMSIG(status)));
            } else if (opts_.warn_on_reap) {
                peer_log().warn("Reaped zombie process with pid={}", pid);
            }
            return true;
        case CompatMode::DumbInit:
            if (WIFEXITED(status))
                peer_log().debug("A child with PID {} exited with exit status {}.", pid,
                                 WEXITSTATUS(status));
            else if (WIFSIGNALED(status))
                peer_log().debug("A child with PID {} was terminated by signal {}.", pid,
                                 WTERMSIG(status));
            if (main_child) {
                // dumb-init sends SIGTERM (through its rewrite table) to what is left, then exits;
                // lastcall sends the same signal and then waits for the rest to be gone.
                int term = rewritten(opts_, SIGTERM);
                if (term != 0) peer_log().debug("Forwarded signal {} to children.", term);
                peer_log().debug("Child exited with status {}. Goodbye.", exit_code_of(status));
            }
            return true;
    }
    return false;
}

void PeerVoice::tty_detach(int err, bool was_leader) const {
    if (opts_.compat != CompatMode::DumbInit) return;
    if (err != 0)
        peer_log().debug("Unable to detach from controlling tty (errno={} {}).", err,
                         std::strerror(err));
    else if (was_leader)
        peer_log().debug(
            "Detached from controlling tty, ignoring the first SIGHUP and SIGCONT we receive.");
    else
        peer_log().debug("Detached from controlling tty, but was not session leader.");
}

void PeerVoice::setsid_done(bool took_tty) const {
    if (opts_.compat != CompatMode::DumbInit || !opts_.new_session) return;
    // dumb-init's child, after its setsid, tries to take stdin as its controlling terminal and
    // says so when stdin is no terminal (lastcall's spawner tries only when it is one).
    if (!took_tty)
        peer_log().debug("Unable to attach to controlling tty (errno={} {}).", ENOTTY,
                         std::strerror(ENOTTY));
    peer_log().debug("setsid complete.");
}

void PeerVoice::subreaper_registered() const {
    if (opts_.compat == CompatMode::Tini) peer_log().trace("Registered as child subreaper");
}

bool PeerVoice::says_idle_polls() const {
    return opts_.compat == CompatMode::Tini && peer_log().should_log(spdlog::level::trace);
}

void PeerVoice::idle_poll() const {
    peer_log().trace("No child to reap");
}

void PeerVoice::exiting() const {
    if (opts_.compat != CompatMode::Tini) return;
    peer_log().trace("No child to wait");
    peer_log().trace("Exiting: child has exited");
}

int PeerVoice::tini_exec_exit_code(int err) {
    if (err == ENOENT) return 127;
    if (err == EACCES) return 126;
    return 1;
}

}  // namespace lastcall
