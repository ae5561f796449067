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
// and the ignored dispositions. The mask lastcall's own parent set is passed in
// LASTCALL_HANDED_OVER, with the reason: by then lastcall has blocked its signals, and tini mode
// hands the parent's mask to the child.
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
// its point of no return. Later it would replace a running supervisor (a config reload looking
// a user up, say), so outside the window hand_over() does nothing.
void open_startup_window(char** argv, const sigset_t& inherited_mask);
void close_startup_window();

// Called where this build meets something only the dynamic twin can do: in the static build,
// execs the twin if the window is open, the twin is installed and this process is not itself a
// hand-over; returns otherwise, for the caller's own error. Does nothing in the dynamic build.
void hand_over(std::string_view why);

// In a process that was handed over: the signal mask the first binary's parent gave it and the
// reason, read once from LASTCALL_HANDED_OVER, which is then removed from the environment so
// that no child sees it. Call it first thing in main(), after blocking signals.
struct HandedOver {
    sigset_t inherited_mask;
    std::string why;
};
std::optional<HandedOver> take_handed_over();

// Whether NSS could answer a user or group lookup differently from /etc/passwd and /etc/group:
// the nsswitch.conf text lists a source other than `files` for passwd, group or initgroups
// (`compat` too: it reads NIS entries). The static build hands such lookups to its twin.
bool nss_beyond_files(std::string_view nsswitch_conf);

}  // namespace lastcall::twin
