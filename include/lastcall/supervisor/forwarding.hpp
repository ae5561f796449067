// SPDX-License-Identifier: Apache-2.0
// What a received signal means, and the lines a peer (tini, dumb-init) prints about it.
//
// The supervisor asks ForwardingPolicy::decide() for every signal it reads (SIGCHLD aside) and
// carries the answer out. Native mode: SIGTERM/SIGINT/SIGQUIT start lastcall's shutdown, job
// control stops the child's group and then lastcall, the rest is forwarded. Compat modes keep the
// peer's contract instead: every signal is forwarded as the peer forwards it, every time, through
// one send that reaches each process once (a group with kill(-pgid), the child through its
// pidfd), and nothing starts a shutdown or a kill while the child runs.
//
// PeerVoice prints the lines the peer prints (its format, its words, its stream), so that scripts
// that grep a peer's output keep working; in native mode it prints nothing and says so.
#pragma once

#include <sys/types.h>

#include <string>

#include "lastcall/cli/options.hpp"

namespace lastcall {

struct SignalAction {
    enum class Kind {
        Drop,      // nothing is sent (rewritten to 0, tini's TTIN/TTOU, a tty hand-off echo)
        Forward,   // sig goes to scope
        Shutdown,  // a termination request for lastcall's own shutdown (sig after rewriting)
        Suspend,   // native job control: the child's group stops, then lastcall
    };
    Kind kind = Kind::Drop;
    int received = 0;
    int sig = 0;  // after rewriting
    Scope scope = Scope::Group;
    // dumb-init: after forwarding (or dropping) a received TSTP/TTIN/TTOU, it stops itself.
    bool stop_self = false;
    // Dropped as the echo of lastcall's own TIOCNOTTY (dumb-init's hand-off).
    bool handoff_echo = false;
};

class ForwardingPolicy {
  public:
    explicit ForwardingPolicy(const Options& options) : opts_(options) {}
    SignalAction decide(int received);
    // Giving up the terminal as a session leader makes the kernel send SIGHUP and SIGCONT to
    // lastcall's own group: the next one of each is lastcall's own doing, not a request.
    void expect_handoff_echo() { ignore_hup_ = ignore_cont_ = true; }

  private:
    const Options& opts_;
    bool ignore_hup_ = false;
    bool ignore_cont_ = false;
};

// The peer's own log lines. Each returns true when it printed the peer's line in place of
// lastcall's (compat modes), false in native mode.
class PeerVoice {
  public:
    explicit PeerVoice(const Options& options) : opts_(options) {}
    bool compat() const { return opts_.compat != CompatMode::None; }
    bool signal(const SignalAction& a) const;
    void sigchld() const;
    bool spawned(pid_t pid, const std::string& argv0) const;
    bool exec_failed(const std::string& argv0, int err) const;
    bool reaped(pid_t pid, int status, bool main_child) const;
    // dumb-init's lines about the terminal hand-off (TIOCNOTTY on itself).
    void tty_detach(int err, bool was_leader) const;
    // dumb-init's child's lines after its setsid (took_tty: it took stdin as its terminal).
    void setsid_done(bool took_tty) const;
    // tini's trace lines: at start when it registered as a subreaper, and at exit.
    void subreaper_registered() const;
    void exiting() const;
    // tini waits for signals 1 s at a time and, after every wait (a signal or the timeout),
    // polls waitpid: at -vvv each poll that finds its child still running says "No child to
    // reap". Whether lastcall is to say the same: tini's name at trace level, nothing otherwise
    // (the 1 s wake is paid only by a run that prints it).
    bool says_idle_polls() const;
    void idle_poll() const;
    // tini's exit code for an exec failure: 127 for ENOENT, 126 for EACCES, 1 otherwise.
    static int tini_exec_exit_code(int err);

  private:
    const Options& opts_;
};

}  // namespace lastcall
