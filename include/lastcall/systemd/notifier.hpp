// SPDX-License-Identifier: Apache-2.0
// The systemd notify protocol (sd_notify(3)): lastcall is the service's main process, so it tells
// systemd READY=1, STATUS=, STOPPING=1, EXTEND_TIMEOUT_USEC= and WATCHDOG=1 on the child's behalf.
// With --ready-on notify it also relays the child's own messages through a proxy socket
// (notify_proxy.hpp): systemd only trusts its main pid, and MAINPID stays lastcall's.
//
// The datagram goes out through one small interface, NotifyChannel: a direct sendto()
// (LASTCALL_NO_LIBSYSTEMD, the default and the static build), or libsystemd's sd_notify() in a
// -DLASTCALL_SHARED_DEPS=ON build. Both behave the same, so the same end-to-end tests cover both.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/supervisor/supervisor.hpp"

namespace lastcall {

class NotifyProxy;

// ---- The datagram format: newline-separated KEY=VALUE assignments ----

struct NotifyAssignment {
    std::string key;
    std::string value;
    bool operator==(const NotifyAssignment&) const = default;
};

struct NotifyFields {
    std::vector<NotifyAssignment> assignments;  // in the order they appeared
    std::vector<std::string> invalid;           // non-empty lines that are not KEY=VALUE
    // The last assignment of key (as systemd reads a repeated key), or nullptr.
    const std::string* find(std::string_view key) const;
};

// Total and pure: any bytes in, never throws, no I/O (a fuzz target). A datagram with an embedded
// NUL is refused as a whole, as systemd does. Keys are environment-style names ([A-Za-z0-9_]+).
Result<NotifyFields> parse_notify_datagram(std::string_view data);

// The keys a supervised child may have relayed to systemd. MAINPID is never among them: systemd's
// main pid is lastcall, and a child must not be able to make systemd watch some other process.
bool is_forwardable_key(std::string_view key);

// ---- Talking to the service manager ----

class NotifyChannel {
  public:
    virtual ~NotifyChannel() = default;
    // One datagram of newline-separated assignments to $NOTIFY_SOCKET. Errors are returned.
    virtual Status send(std::string_view message) = 0;
};

// Where a NOTIFY_SOCKET value points: a filesystem path, or an abstract name ('@' prefix).
struct NotifyAddress {
    std::string path;  // for abstract sockets, starts with '\0'
};
Result<NotifyAddress> parse_notify_address(std::string_view value);

// sendto() on our own AF_UNIX datagram socket: the static build's channel, compiled in every build.
Result<std::unique_ptr<NotifyChannel>> open_socket_channel(std::string_view notify_socket);

// This build's channel for $NOTIFY_SOCKET, or nullptr when it is unset or names no address
// lastcall can send to (that one logged as a warning: the command runs all the same).
Result<std::unique_ptr<NotifyChannel>> channel_from_environment();

// WATCHDOG_USEC when the watchdog is meant for pid `self` (WATCHDOG_PID unset, or equal to self),
// as sd_watchdog_enabled(3) decides; nullopt when off or malformed.
std::optional<std::chrono::microseconds> watchdog_interval(const char* watchdog_usec,
                                                           const char* watchdog_pid, pid_t self);

// ---- The component ----

class Notifier final : public SupervisorComponent {
  public:
    // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from lastcall's environment.
    static Result<std::unique_ptr<Notifier>> from_environment(const Options& options,
                                                              const Clock& clock);
    Notifier(std::unique_ptr<NotifyChannel> channel,
             std::optional<std::chrono::microseconds> watchdog, const Options& options,
             const Clock& clock);
    ~Notifier() override;

    Status attach(Supervisor& s) override;
    void prepare_spawn(SpawnSpec& spec, bool main_child) override;
    void child_started(pid_t pid) override;
    void state_changed(State from, State to) override;
    bool announces_shutdown() const override { return channel_ != nullptr; }
    void reaped(const Reaped& r) override;
    void finished(int exit_code) override;

  private:
    void send(const std::string& message);
    void set_watchdog(bool on);
    void on_watchdog_timer();
    void on_proxy_readable();
    bool in_tree(pid_t pid, std::optional<std::set<pid_t>>& members);
    std::string extend_timeout(std::chrono::milliseconds remaining) const;

    std::unique_ptr<NotifyChannel> channel_;
    std::optional<std::chrono::microseconds> watchdog_;
    ReadyOn ready_on_;
    std::chrono::milliseconds grace_;
    std::optional<Credentials> user_;
    bool has_command_;
    const Clock& clock_;

    Supervisor* supervisor_ = nullptr;
    UniqueFd watchdog_fd_;
    std::unique_ptr<NotifyProxy> proxy_;
    bool ready_sent_ = false;
    bool send_failed_ = false;
    pid_t main_pid_ = -1;
    std::optional<MonoTime> shutdown_started_;
    // Pids reaped since the proxy last read: a child that sends READY=1 and exits at once may be
    // reaped before its datagram is read, and must not be refused for it.
    std::set<pid_t> recently_reaped_;
};

}  // namespace lastcall
