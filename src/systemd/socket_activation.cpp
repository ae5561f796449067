// SPDX-License-Identifier: Apache-2.0
#include "lastcall/systemd/socket_activation.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

namespace lastcall {

namespace {

// sd_listen_fds(3) starts at SD_LISTEN_FDS_START, which is 3.
constexpr int kFirstFd = 3;

std::optional<long> parse_positive(const char* s) {
    if (!s || *s < '0' || *s > '9') return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v <= 0) return std::nullopt;
    return v;
}

}  // namespace

int listen_fds_for(const char* listen_pid, const char* listen_fds, pid_t self) {
    auto pid = parse_positive(listen_pid);
    auto fds = parse_positive(listen_fds);
    if (!pid || !fds || *pid != self) return 0;
    // Far more than any unit passes; a bigger value is garbage, not a request to keep every fd.
    if (*fds > 4096) return 0;
    return static_cast<int>(*fds);
}

Result<std::unique_ptr<SocketActivation>> SocketActivation::from_environment() {
    const char* pid = std::getenv("LISTEN_PID");
    const char* fds = std::getenv("LISTEN_FDS");
    int count = listen_fds_for(pid, fds, ::getpid());
    if (count == 0 && pid && fds)
        spdlog::debug("LISTEN_FDS={} is for pid {}, not lastcall: passed through untouched", fds,
                      pid);
    for (int fd = kFirstFd; fd < kFirstFd + count; ++fd) {
        int flags = ::fcntl(fd, F_GETFD);
        if (flags < 0)
            return Error{"socket activation: LISTEN_FDS=" + std::to_string(count) + " but fd " +
                         std::to_string(fd) + " is not open: " + std::strerror(errno)};
        if (::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
            return sys_error("socket activation: fcntl F_SETFD fd " + std::to_string(fd), errno);
    }
    if (count > 0)
        spdlog::debug("socket activation: fds 3..{} go to the main child", kFirstFd + count - 1);
    return std::make_unique<SocketActivation>(count);
}

void SocketActivation::prepare_spawn(SpawnSpec& spec, bool main_child) {
    if (count_ == 0) return;
    if (main_child) {
        spec.keep_fds = count_;
        spec.set_listen_pid = true;
        return;
    }
    // Hooks get no sockets; the variables would promise some.
    std::erase_if(spec.env, [](const std::string& kv) {
        return kv.starts_with("LISTEN_PID=") || kv.starts_with("LISTEN_FDS=") ||
               kv.starts_with("LISTEN_FDNAMES=");
    });
}

}  // namespace lastcall
