// SPDX-License-Identifier: Apache-2.0
// The static binary and its dynamically linked twin.
//
// The .deb installs two builds of the same sources: /usr/bin/lastcall is the static one (a start
// costs about as many page faults as catatonit's, where any dynamically linked program pays the
// loader and libc's relocations first: issue 18), and /usr/libexec/lastcall/lastcall is the
// dynamic one, for the three things a static binary cannot do: load libpq (a postgresql://
// ledger), load libmicrohttpd (--metrics-listen), and ask NSS about users and groups (LDAP, sssd,
// systemd's users). A run that needs one of them is handed over: the static binary execs its
// twin with the same argv and environment, before it has started anything. The kernel keeps
// what must survive: the PID (PID 1 stays PID 1, LISTEN_PID stays true), the inherited fds
// (socket activation), the blocked mask (a signal sent meanwhile stays pending across execve)
// and the ignored dispositions. LASTCALL_HANDED_OVER carries the rest: the mask lastcall's own
// parent set (by then lastcall has blocked its signals, and tini mode hands the parent's mask to
// the child), the process name (a `tini` symlink's comm stays `tini`), the version, and the
// reason, for -v. It names the PID it was set for, so a stray copy in the environment is not
// taken for a hand-over.
//
// The twin reads the command line, the config and the crontab again, so an input that cannot be
// read twice (a pipe, /dev/stdin) is handed over before the static binary reads it. What the
// kernel does not carry: /proc/PID/exe names the twin, and file capabilities given to
// /usr/bin/lastcall (setcap) are not the twin's unless it is given them too.
//
// Without a twin (make static's binary copied into a scratch image) nothing is handed over and
// the caller reports its own error, as it always did.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <string_view>

namespace lastcall::twin {

// A hand-over is allowed only while lastcall has started nothing: from main()'s first line to
// its point of no return (for the read-only subcommands, to their end). Later it would replace
// a running supervisor, so outside the window hand_over() does nothing.
void open_startup_window(char** argv, const sigset_t& inherited_mask);
void close_startup_window();

// The argv main() received, which a hand-over execs (null before open_startup_window): for a
// subcommand that rewrites a secret in it (`lastcall runs --ledger`) once it has passed its
// last hand-over, as the supervisor does at its point of no return.
char** own_argv();

// Called where this build meets something only the dynamic twin can do: in the static build,
// execs the twin if the window is open, the twin is installed and this process is not itself a
// hand-over; returns otherwise, for the caller's own error. Does nothing in the dynamic build.
void hand_over(std::string_view why);

// An input the twin could not read again (neither a regular file nor a directory: a pipe,
// /dev/stdin, a FIFO) goes to the twin unread, since a hand-over may still come once it is read
// (a `user` in it, a postgresql:// ledger). Does nothing for a regular file, a directory, a
// missing one, or outside the window.
void hand_over_before_reading(const std::string& path);

// In a process that was handed over: what the static binary passed on, read once from
// LASTCALL_HANDED_OVER, which is then removed from the environment so that no child sees it; the
// process name is set back to the static binary's. Call it first thing in main(), after
// blocking signals.
struct HandedOver {
    sigset_t inherited_mask;
    std::string version;  // the static binary's: a twin of another version says so at -v
    std::string why;
};
std::optional<HandedOver> take_handed_over();

// Whether NSS could answer a user or group lookup differently from /etc/passwd and /etc/group:
// the nsswitch.conf text lists a source other than `files` for passwd, group or initgroups
// (`compat` too: it reads NIS entries). Read as glibc 2.33+ reads it: only a line that starts
// with `#` is a comment, and the database name may end at a space instead of a colon. The static
// build hands such lookups to its twin.
bool nss_beyond_files(std::string_view nsswitch_conf);

}  // namespace lastcall::twin
