// SPDX-License-Identifier: Apache-2.0
// Socket activation (sd_listen_fds(3)): systemd passed listening sockets at fds 3..3+N-1 and named
// lastcall in LISTEN_PID. They go on to the main child at the same numbers, and the spawner
// rewrites LISTEN_PID to the child's own pid before exec, so the child's sd_listen_fds() accepts
// them. lastcall itself never reads, polls or closes them.
#pragma once

#include <sys/types.h>

#include <memory>

#include "lastcall/core/error.hpp"
#include "lastcall/supervisor/supervisor.hpp"

namespace lastcall {

// How many descriptors systemd passed to `self`: LISTEN_FDS when LISTEN_PID equals self, else 0
// (the variables are meant for another process). Malformed values count as none. Pure.
int listen_fds_for(const char* listen_pid, const char* listen_fds, pid_t self);

class SocketActivation final : public SupervisorComponent {
  public:
    // Reads LISTEN_PID/LISTEN_FDS, checks that every passed fd is open and makes it CLOEXEC in
    // lastcall, so that hooks never inherit it. Must run before lastcall opens any fd of its own:
    // otherwise a missing fd 3 could be taken by, say, the epoll fd and handed to the child.
    static Result<std::unique_ptr<SocketActivation>> from_environment();
    explicit SocketActivation(int count) : count_(count) {}

    int count() const { return count_; }
    void prepare_spawn(SpawnSpec& spec, bool main_child) override;

  private:
    int count_;
};

}  // namespace lastcall
