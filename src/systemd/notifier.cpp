// SPDX-License-Identifier: Apache-2.0
#include "lastcall/systemd/notifier.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "lastcall/core/duration.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/systemd/notify_proxy.hpp"

namespace lastcall {

namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// Added to every EXTEND_TIMEOUT_USEC: after the grace, lastcall may spend up to force_limit
// waiting for SIGKILLed processes, then reaps, writes the report and exits.
constexpr milliseconds kExitSlack{1000};
// Bounds the memory of recently reaped pids if no datagram ever comes to clear it.
constexpr std::size_t kMaxRecentlyReaped = 4096;

bool is_key_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

// For log lines: a datagram on one line.
std::string one_line(std::string_view s) {
    std::string out(s);
    std::replace(out.begin(), out.end(), '\n', ' ');
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

void erase_env(std::vector<std::string>& env, std::string_view key) {
    std::erase_if(env, [&](const std::string& kv) {
        return kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 &&
               kv[key.size()] == '=';
    });
}

class SocketChannel final : public NotifyChannel {
  public:
    SocketChannel(UniqueFd fd, NotifyAddress address)
        : fd_(std::move(fd)), address_(std::move(address)) {}

    Status send(std::string_view message) override {
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, address_.path.data(), address_.path.size());
        // An abstract name is exactly its bytes; the length must not include anything more.
        auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.path.size());
        ssize_t n;
        do {
            // Never blocks the loop: a manager that does not read its socket loses a message,
            // it does not stall the teardown.
            n = ::sendto(fd_.get(), message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                         reinterpret_cast<sockaddr*>(&addr), len);
        } while (n < 0 && errno == EINTR);
        if (n < 0) return sys_error("sendto NOTIFY_SOCKET " + printable(), errno);
        return Ok{};
    }

  private:
    std::string printable() const {
        return address_.path[0] == '\0' ? "@" + address_.path.substr(1) : address_.path;
    }
    UniqueFd fd_;
    NotifyAddress address_;
};

}  // namespace

// ---- Datagram format ----

const std::string* NotifyFields::find(std::string_view key) const {
    for (auto it = assignments.rbegin(); it != assignments.rend(); ++it)
        if (it->key == key) return &it->value;
    return nullptr;
}

Result<NotifyFields> parse_notify_datagram(std::string_view data) {
    if (data.find('\0') != std::string_view::npos)
        return Error{"notify datagram contains a NUL byte"};
    NotifyFields fields;
    std::size_t start = 0;
    while (start < data.size()) {
        std::size_t end = data.find('\n', start);
        if (end == std::string_view::npos) end = data.size();
        std::string_view line = data.substr(start, end - start);
        start = end + 1;
        if (line.empty()) continue;
        std::size_t eq = line.find('=');
        bool valid = eq != std::string_view::npos && eq > 0 &&
                     std::all_of(line.begin(), line.begin() + static_cast<long>(eq), is_key_char);
        if (!valid) {
            fields.invalid.emplace_back(line);
            continue;
        }
        fields.assignments.push_back(
            {std::string(line.substr(0, eq)), std::string(line.substr(eq + 1))});
    }
    return fields;
}

bool is_forwardable_key(std::string_view key) {
    // MONOTONIC_USEC accompanies RELOADING=1 (Type=notify-reload); BUSERROR accompanies ERRNO.
    static constexpr std::string_view kKeys[] = {"READY", "STATUS",   "RELOADING",     "STOPPING",
                                                 "ERRNO", "BUSERROR", "MONOTONIC_USEC"};
    return std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

// ---- Channels ----

Result<NotifyAddress> parse_notify_address(std::string_view value) {
    constexpr std::size_t kMax = sizeof(sockaddr_un::sun_path);
    if (value.empty()) return Error{"NOTIFY_SOCKET is empty"};
    if (value[0] == '@') {
        if (value.size() < 2) return Error{"NOTIFY_SOCKET '@': empty abstract socket name"};
        if (value.size() > kMax)
            return Error{"NOTIFY_SOCKET '" + std::string(value) + "': longer than " +
                         std::to_string(kMax) + " bytes"};
        return NotifyAddress{std::string(1, '\0') + std::string(value.substr(1))};
    }
    if (value[0] != '/')
        return Error{"NOTIFY_SOCKET '" + std::string(value) +
                     "': neither an absolute path nor an abstract '@' name"};
    if (value.size() >= kMax)
        return Error{"NOTIFY_SOCKET '" + std::string(value) + "': longer than " +
                     std::to_string(kMax - 1) + " bytes"};
    return NotifyAddress{std::string(value)};
}

Result<std::unique_ptr<NotifyChannel>> open_socket_channel(std::string_view notify_socket) {
    auto address = parse_notify_address(notify_socket);
    if (!address) return address.error();
    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket AF_UNIX for NOTIFY_SOCKET", errno);
    return std::unique_ptr<NotifyChannel>(new SocketChannel(std::move(fd), std::move(*address)));
}

Result<std::unique_ptr<NotifyChannel>> channel_from_environment() {
    const char* value = std::getenv("NOTIFY_SOCKET");
    if (!value) return std::unique_ptr<NotifyChannel>();
    // lastcall's own datagram sender in every build, not libsystemd's sd_notify(): that one
    // blocks in sendmsg() when the manager's socket buffer is full, and the loop must not.
    auto channel = open_socket_channel(value);
    // An address lastcall cannot send to (empty, systemd 253's vsock:, too long) is the
    // manager's problem to report, not a reason to keep the command from running: sd_notify()
    // fails and its caller goes on. The warning says why the manager will hear nothing.
    if (!channel) {
        spdlog::warn("{}: no notifications will be sent", channel.error().message);
        return std::unique_ptr<NotifyChannel>();
    }
    return channel;
}

std::optional<microseconds> watchdog_interval(const char* watchdog_usec, const char* watchdog_pid,
                                              pid_t self) {
    auto parse = [](const char* s) -> std::optional<unsigned long long> {
        if (!s || !*s || *s < '0' || *s > '9') return std::nullopt;
        errno = 0;
        char* end = nullptr;
        unsigned long long v = std::strtoull(s, &end, 10);
        if (errno != 0 || *end != '\0') return std::nullopt;
        return v;
    };
    auto usec = parse(watchdog_usec);
    if (!usec || *usec == 0) return std::nullopt;
    if (watchdog_pid) {
        auto pid = parse(watchdog_pid);
        if (!pid || *pid != static_cast<unsigned long long>(self)) return std::nullopt;
    }
    return microseconds(*usec);
}

// ---- The component ----

Result<std::unique_ptr<Notifier>> Notifier::from_environment(const Options& options,
                                                             const Clock& clock) {
    auto channel = channel_from_environment();
    if (!channel) return channel.error();
    std::optional<microseconds> watchdog;
    if (*channel)
        watchdog = watchdog_interval(std::getenv("WATCHDOG_USEC"), std::getenv("WATCHDOG_PID"),
                                     ::getpid());
    return std::make_unique<Notifier>(std::move(*channel), watchdog, options, clock);
}

Notifier::Notifier(std::unique_ptr<NotifyChannel> channel, std::optional<microseconds> watchdog,
                   const Options& options, const Clock& clock)
    : channel_(std::move(channel)),
      watchdog_(watchdog),
      ready_on_(options.ready_on),
      grace_(options.grace),
      user_(options.credentials),
      has_command_(!options.command.empty()),
      clock_(clock) {}

Notifier::~Notifier() = default;

Status Notifier::attach(Supervisor& s) {
    supervisor_ = &s;
    if (!channel_) {
        if (ready_on_ == ReadyOn::Notify)
            spdlog::debug("--ready-on notify: NOTIFY_SOCKET is not set, nobody to relay to");
        return Ok{};
    }
    if (watchdog_) {
        watchdog_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
        if (!watchdog_fd_) return sys_error("timerfd_create for the systemd watchdog", errno);
        auto st =
            s.loop().watch(watchdog_fd_.get(), EPOLLIN, [this](auto) { on_watchdog_timer(); });
        if (!st) return st;
        spdlog::debug("systemd watchdog: WATCHDOG=1 every {}",
                      format_duration(duration_cast<milliseconds>(*watchdog_ / 2)));
    }
    if (ready_on_ == ReadyOn::Notify) {
        std::optional<uid_t> uid;
        std::optional<gid_t> gid;
        if (user_) {
            uid = user_->uid;
            gid = user_->gid;
        }
        std::string base = notify_runtime_base(std::getenv("RUNTIME_DIRECTORY"),
                                               std::getenv("XDG_RUNTIME_DIR"), ::geteuid() == 0);
        auto proxy = NotifyProxy::create(base, uid, gid);
        if (!proxy) return Error{"notify proxy: " + proxy.error().message};
        proxy_ = std::move(*proxy);
        auto st = s.loop().watch(proxy_->fd(), EPOLLIN, [this](auto) { on_proxy_readable(); });
        if (!st) return st;
        spdlog::debug("notify proxy on {}: READY=1 goes to systemd when the child sends it",
                      proxy_->socket_path());
    }
    if (!has_command_) {
        // No main child to wait for: the components' work starts now.
        send(ready_on_ == ReadyOn::Spawn ? "READY=1\nSTATUS=running" : "STATUS=running");
        ready_sent_ = ready_on_ == ReadyOn::Spawn;
        set_watchdog(true);
    }
    return Ok{};
}

void Notifier::prepare_spawn(SpawnSpec& spec, bool /*main_child*/) {
    if (!channel_) return;
    // The watchdog is lastcall's to keep: a child that found WATCHDOG_USEC would ping a socket
    // that is not systemd's, or none at all.
    erase_env(spec.env, "WATCHDOG_USEC");
    erase_env(spec.env, "WATCHDOG_PID");
    erase_env(spec.env, "NOTIFY_SOCKET");
    if (proxy_) spec.env.push_back("NOTIFY_SOCKET=" + proxy_->socket_path());
}

void Notifier::child_started(pid_t pid) {
    main_pid_ = pid;
    if (!channel_) return;
    std::string status = "STATUS=running: pid " + std::to_string(pid);
    if (ready_on_ == ReadyOn::Spawn) {
        send("READY=1\n" + status);
        ready_sent_ = true;
    } else {
        send(status + ", waiting for its READY=1");
    }
    set_watchdog(true);
}

std::string Notifier::extend_timeout(milliseconds remaining) const {
    milliseconds total =
        std::max(remaining, milliseconds(0)) + ShutdownConfig{}.force_limit + kExitSlack;
    return "EXTEND_TIMEOUT_USEC=" + std::to_string(duration_cast<microseconds>(total).count());
}

void Notifier::state_changed(State from, State to) {
    if (from == State::Running) shutdown_started_ = clock_.now();
    if (to == State::Stopped) set_watchdog(false);
    if (!channel_) return;
    milliseconds left = grace_;
    if (shutdown_started_) left -= duration_cast<milliseconds>(clock_.now() - *shutdown_started_);
    switch (to) {
        case State::Draining:
            // STOPPING=1 first: systemd takes the service out of "active" before anything else
            // of the shutdown happens, like the readiness file.
            send("STOPPING=1\nSTATUS=draining: readiness off, grace " + format_duration(grace_) +
                 "\n" + extend_timeout(left));
            break;
        case State::Stopping:
            send("STATUS=stopping: waiting up to " +
                 format_duration(std::max(left, milliseconds(0))) + " for the tree to exit\n" +
                 extend_timeout(left));
            break;
        case State::Forcing:
            send("STATUS=forcing: SIGKILL sent to the tree\n" + extend_timeout(milliseconds(0)));
            break;
        default:
            break;
    }
}

void Notifier::reaped(const Reaped& r) {
    if (r.pid == main_pid_) set_watchdog(false);
    if (!proxy_) return;
    if (recently_reaped_.size() < kMaxRecentlyReaped) recently_reaped_.insert(r.pid);
    // Whatever is queued was sent before this exit; read it now, while the state is still what
    // the sender saw: a main child that says READY=1 and exits is ready before it is stopping.
    // Only the main child's exit, and only while running: its exit is the reap that begins a
    // stop, and once stopping READY=1 counts for nothing. Read at every reap, a flood of
    // datagrams cost a walk of the tree per reaped process: a thousand processes ending
    // under a flood held the loop, and the grace timer, for 7-30 s.
    if (r.pid == main_pid_ && supervisor_->state() == State::Running) on_proxy_readable();
}

void Notifier::finished(int exit_code) {
    set_watchdog(false);
    if (channel_) send("STATUS=stopped: exit code " + std::to_string(exit_code));
    // Shared resources close only now, after every process is reaped.
    if (watchdog_fd_) {
        supervisor_->loop().unwatch(watchdog_fd_.get());
        watchdog_fd_.reset();
    }
    if (proxy_) {
        supervisor_->loop().unwatch(proxy_->fd());
        proxy_.reset();
    }
}

void Notifier::send(const std::string& message) {
    spdlog::debug("notify: {}", one_line(message));
    auto st = channel_->send(message);
    if (!st) {
        // Once per outage: the watchdog would otherwise repeat it twice per interval.
        if (!send_failed_)
            spdlog::warn("notify: {} (further failures logged at debug)", st.error().message);
        else
            spdlog::debug("notify: {}", st.error().message);
        send_failed_ = true;
    } else if (send_failed_) {
        spdlog::info("notify: messages reach the service manager again");
        send_failed_ = false;
    }
}

void Notifier::set_watchdog(bool on) {
    if (!watchdog_fd_) return;
    itimerspec spec{};
    if (on) {
        auto half = *watchdog_ / 2;
        auto secs = std::chrono::duration_cast<std::chrono::seconds>(half);
        spec.it_interval.tv_sec = secs.count();
        spec.it_interval.tv_nsec =
            std::chrono::duration_cast<std::chrono::nanoseconds>(half - secs).count();
        spec.it_value = spec.it_interval;
        if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    }
    if (::timerfd_settime(watchdog_fd_.get(), 0, &spec, nullptr) != 0)
        spdlog::error("systemd watchdog: timerfd_settime: {}", std::strerror(errno));
    if (!on) {
        // A tick that expired before the disarm would still be readable: drop it.
        std::uint64_t ticks;
        [[maybe_unused]] auto n = ::read(watchdog_fd_.get(), &ticks, sizeof ticks);
    }
}

void Notifier::on_watchdog_timer() {
    std::uint64_t ticks;
    if (::read(watchdog_fd_.get(), &ticks, sizeof ticks) != sizeof ticks) return;
    send("WATCHDOG=1");
}

bool Notifier::in_tree(pid_t pid, std::optional<std::set<pid_t>>& members) {
    if (pid <= 0 || pid == ::getpid()) return false;
    // Read once per batch: each read walks the whole tree (cgroup.procs, or all of /proc), and a
    // datagram costs its sender nothing.
    if (!members) {
        members.emplace();
        for (const auto& p : supervisor_->tracker().members()) members->insert(p.pid);
    }
    if (members->count(pid)) return true;
    // The tracker leaves zombies out, but a child that sent its message and exited is still ours:
    // follow its parents (kept in /proc until the reap) up to lastcall, the subreaper of the tree.
    pid_t self = ::getpid();
    pid_t cur = pid;
    for (int depth = 0; depth < 4096; ++depth) {
        auto info = read_proc_stat(cur);
        if (!info) break;
        if (info->ppid == self) return true;
        if (info->ppid <= 1) break;
        cur = info->ppid;
    }
    return recently_reaped_.count(pid) > 0;
}

void Notifier::on_proxy_readable() {
    // At most kDatagramsPerTurn, then the loop gets its turn back (the socket stays readable:
    // the next turn goes on): a member that floods the socket must not keep lastcall from its
    // signals and its grace timer. Reading until EAGAIN, a flood held a SIGTERM for 52 s.
    constexpr int kDatagramsPerTurn = 64;
    std::optional<std::set<pid_t>> members;
    int refused = 0;
    bool drained = false;
    for (int n = 0; n < kDatagramsPerTurn; ++n) {
        auto got = proxy_->receive();
        if (!got) {
            spdlog::error("notify proxy: {}", got.error().message);
            drained = true;
            break;
        }
        if (!*got) {
            drained = true;
            break;
        }
        const NotifyDatagram& d = **got;
        if (d.truncated) {
            spdlog::warn("notify proxy: refused a datagram from pid {}: longer than {} bytes",
                         d.pid, d.data.size());
            continue;
        }
        if (!in_tree(d.pid, members)) {
            // One line per refused sender and batch, not one per datagram of a flood.
            if (++refused <= 3)
                spdlog::warn(
                    "notify proxy: refused a datagram from pid {}: not in the supervised tree "
                    "({})",
                    d.pid, one_line(d.data));
            continue;
        }
        auto fields = parse_notify_datagram(d.data);
        if (!fields) {
            spdlog::warn("notify proxy: refused a datagram from pid {}: {}", d.pid,
                         fields.error().message);
            continue;
        }
        std::string out;
        for (const auto& a : fields->assignments) {
            if (a.key == "READY") {
                if (a.value != "1") continue;
                if (supervisor_->state() != State::Running) {
                    spdlog::debug(
                        "notify proxy: READY=1 from pid {} ignored: already shutting down", d.pid);
                    continue;
                }
                if (!ready_sent_)
                    spdlog::debug("pid {} says it is ready: telling systemd READY=1", d.pid);
                ready_sent_ = true;
            } else if (a.key == "MAINPID") {
                spdlog::warn(
                    "notify proxy: MAINPID={} from pid {} not relayed: the main pid is "
                    "lastcall's",
                    a.value, d.pid);
                continue;
            } else if (!is_forwardable_key(a.key)) {
                spdlog::debug("notify proxy: {}= from pid {} not relayed", a.key, d.pid);
                continue;
            }
            out += a.key + "=" + a.value + "\n";
        }
        if (!fields->invalid.empty())
            spdlog::debug("notify proxy: {} malformed line(s) from pid {} ignored",
                          fields->invalid.size(), d.pid);
        if (!out.empty()) {
            out.pop_back();
            send(out);
        }
    }
    if (refused > 3)
        spdlog::warn("notify proxy: refused {} more datagram(s) from outside the supervised tree",
                     refused - 3);
    // What was reaped before these datagrams were read stays attributable until the queue is
    // empty: a batch cut by the limit goes on next turn with the same knowledge.
    if (drained) recently_reaped_.clear();
}

}  // namespace lastcall
