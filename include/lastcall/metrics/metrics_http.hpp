// SPDX-License-Identifier: Apache-2.0
// --metrics-listen ADDR: GET /metrics serves the text of --metrics-file (metrics.hpp), by
// libmicrohttpd (Debian's libmicrohttpd12) on lastcall's own event loop: no thread, no blocking
// call; a client that stops reading costs a connection slot until its timeout, never the loop.
//
// libmicrohttpd is loaded with dlopen when the option is given, not linked: it brings GnuTLS
// and a dozen libraries that every other run of lastcall (an init starts millions of times)
// would map at start-up for nothing (issue 18). The static build cannot load it and says so.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/core/event_loop.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/supervisor/supervisor.hpp"

namespace lastcall {

// "HOST:PORT", ":PORT" (every interface, as Prometheus exporters take it) or "[IPV6]:PORT".
struct ListenAddress {
    sockaddr_storage addr{};
    socklen_t len = 0;
    std::string text;  // as given
};
Result<ListenAddress> parse_listen_address(const std::string& text);

class MetricsServer final : public SupervisorComponent {
  public:
    // Loads libmicrohttpd, binds and listens: every way this can fail is a start-up error.
    static Result<std::unique_ptr<MetricsServer>> open(const std::string& listen);
    // What the metrics come from (SupervisorComponent::contribute_metrics); before attach.
    void set_sources(std::vector<SupervisorComponent*> sources) { sources_ = std::move(sources); }
    ~MetricsServer() override;
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    // The port it listens on (the kernel's choice for port 0).
    int port() const { return port_; }

    Status attach(Supervisor& sup) override;
    void finished(int exit_code) override;

    struct Library;

  private:
    MetricsServer() = default;
    void run_daemon();
    void rearm();
    std::string text() const;

    std::shared_ptr<const Library> lib_;
    void* daemon_ = nullptr;  // struct MHD_Daemon*
    UniqueFd listener_;
    int port_ = 0;
    std::string listen_;
    std::vector<SupervisorComponent*> sources_;
    Supervisor* sup_ = nullptr;
    int epoll_fd_ = -1;  // libmicrohttpd's, watched on lastcall's loop
    std::optional<DeadlineTimer> timer_;
};

}  // namespace lastcall
