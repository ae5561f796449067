// SPDX-License-Identifier: Apache-2.0
#include "lastcall/metrics/metrics_http.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "lastcall/core/linkage.hpp"
#include "lastcall/core/shared_library.hpp"
#include "lastcall/core/twin.hpp"
#include "lastcall/metrics/metrics.hpp"

namespace lastcall {

// The entry points lastcall uses, resolved once from libmicrohttpd.so.12. The types come from
// <microhttpd.h> (build time only: nothing is linked).
struct MetricsServer::Library {
    void* handle = nullptr;
    decltype(&::MHD_start_daemon) start_daemon = nullptr;
    decltype(&::MHD_stop_daemon) stop_daemon = nullptr;
    decltype(&::MHD_run) run = nullptr;
    decltype(&::MHD_get_timeout) get_timeout = nullptr;
    decltype(&::MHD_get_daemon_info) get_daemon_info = nullptr;
    decltype(&::MHD_create_response_from_buffer) create_response = nullptr;
    decltype(&::MHD_add_response_header) add_header = nullptr;
    decltype(&::MHD_queue_response) queue_response = nullptr;
    decltype(&::MHD_destroy_response) destroy_response = nullptr;
    ~Library() {
        if (handle) ::dlclose(handle);
    }
};

namespace {

constexpr const char* kLibrary = "libmicrohttpd.so.12";

Result<std::shared_ptr<const MetricsServer::Library>> load_library() {
    if (!can_load_shared_libraries()) {
        twin::hand_over("--metrics-listen needs libmicrohttpd");
        return Error{
            "--metrics-listen needs libmicrohttpd, which the static build cannot load "
            "(use --metrics-file, or install the .deb, whose /usr/bin/lastcall hands such runs "
            "to its dynamic twin)"};
    }
    auto lib = std::make_shared<MetricsServer::Library>();
    lib->handle = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle)
        return Error{std::string("--metrics-listen needs libmicrohttpd12 (apt-get install "
                                 "libmicrohttpd12): ") +
                     ::dlerror()};
    bool ok =
        resolve_symbol(lib->handle, "MHD_start_daemon", lib->start_daemon) &&
        resolve_symbol(lib->handle, "MHD_stop_daemon", lib->stop_daemon) &&
        resolve_symbol(lib->handle, "MHD_run", lib->run) &&
        resolve_symbol(lib->handle, "MHD_get_timeout", lib->get_timeout) &&
        resolve_symbol(lib->handle, "MHD_get_daemon_info", lib->get_daemon_info) &&
        resolve_symbol(lib->handle, "MHD_create_response_from_buffer", lib->create_response) &&
        resolve_symbol(lib->handle, "MHD_add_response_header", lib->add_header) &&
        resolve_symbol(lib->handle, "MHD_queue_response", lib->queue_response) &&
        resolve_symbol(lib->handle, "MHD_destroy_response", lib->destroy_response);
    if (!ok) return Error{std::string(kLibrary) + ": " + ::dlerror()};
    return std::shared_ptr<const MetricsServer::Library>(std::move(lib));
}

struct Request {
    const MetricsServer::Library* lib;
    const std::string* body;  // null: not found
};

MHD_Result reply(const MetricsServer::Library& lib, MHD_Connection* connection, unsigned status,
                 const std::string& body, const char* type) {
    MHD_Response* response =
        lib.create_response(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
    if (!response) return MHD_NO;
    lib.add_header(response, "Content-Type", type);
    MHD_Result r = lib.queue_response(connection, status, response);
    lib.destroy_response(response);
    return r;
}

}  // namespace

Result<ListenAddress> parse_listen_address(const std::string& text) {
    ListenAddress out;
    out.text = text;
    auto bad = [&] {
        return Error{"--metrics-listen '" + text + "': expected HOST:PORT, :PORT or [IPV6]:PORT"};
    };
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return bad();
    std::string host = text.substr(0, colon), port_text = text.substr(colon + 1);
    if (port_text.empty() || port_text.size() > 5 ||
        port_text.find_first_not_of("0123456789") != std::string::npos)
        return bad();
    int port = std::stoi(port_text);
    if (port > 65535) return bad();
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        auto* a = reinterpret_cast<sockaddr_in6*>(&out.addr);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(static_cast<std::uint16_t>(port));
        if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a->sin6_addr) != 1)
            return bad();
        out.len = sizeof(sockaddr_in6);
        return out;
    }
    auto* a = reinterpret_cast<sockaddr_in*>(&out.addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<std::uint16_t>(port));
    if (host.empty())
        a->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (host == "localhost")
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (::inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1)
        return bad();
    out.len = sizeof(sockaddr_in);
    return out;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::open(const std::string& listen) {
    auto address = parse_listen_address(listen);
    if (!address) return address.error();
    auto lib = load_library();
    if (!lib) return lib.error();
    std::unique_ptr<MetricsServer> server(new MetricsServer());
    server->lib_ = std::move(*lib);
    server->listen_ = listen;
    // lastcall binds the socket itself, for errors that say what failed (libmicrohttpd only
    // says it could not start) and a descriptor no child inherits.
    const std::string what = "--metrics-listen " + listen;
    int fd = ::socket(address->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return sys_error(what + ": socket", errno);
    server->listener_ = UniqueFd(fd);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&address->addr), address->len) != 0)
        return sys_error(what + ": bind", errno);
    if (::listen(fd, 16) != 0) return sys_error(what + ": listen", errno);
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
        server->port_ =
            ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

    // External polling: libmicrohttpd's own epoll fd is watched on lastcall's loop and MHD_run
    // is called when it is readable (and when MHD_get_timeout says): no thread of its own.
    // Requests are answered from that call, on the loop, so the text is built from the same
    // single-threaded state as everything else.
    MHD_AccessHandlerCallback handler = [](void* cls, MHD_Connection* connection, const char* url,
                                           const char* method, const char*, const char*,
                                           size_t* upload_size, void**) -> MHD_Result {
        auto* self = static_cast<MetricsServer*>(cls);
        const Library& lib = *self->lib_;
        if (*upload_size != 0) {
            *upload_size = 0;  // no request body is read
            return MHD_YES;
        }
        if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0)
            return reply(lib, connection, 405, "only GET\n", "text/plain");
        if (std::strcmp(url, "/metrics") != 0)
            return reply(lib, connection, 404, "lastcall serves /metrics\n", "text/plain");
        return reply(lib, connection, 200, self->text(),
                     "text/plain; version=0.0.4; charset=utf-8");
    };
    MetricsServer* self = server.get();
    server->daemon_ = server->lib_->start_daemon(MHD_USE_EPOLL, 0, nullptr, nullptr, handler, self,
                                                 MHD_OPTION_LISTEN_SOCKET, server->listener_.get(),
                                                 MHD_OPTION_CONNECTION_LIMIT, 16u,
                                                 MHD_OPTION_CONNECTION_TIMEOUT, 5u, MHD_OPTION_END);
    if (!server->daemon_) return Error{what + ": libmicrohttpd could not start"};
    const MHD_DaemonInfo* info = server->lib_->get_daemon_info(
        static_cast<MHD_Daemon*>(server->daemon_), MHD_DAEMON_INFO_EPOLL_FD);
    if (!info) return Error{what + ": libmicrohttpd has no epoll descriptor"};
    server->epoll_fd_ = info->epoll_fd;
    return server;
}

MetricsServer::~MetricsServer() {
    if (daemon_) lib_->stop_daemon(static_cast<MHD_Daemon*>(daemon_));
    // libmicrohttpd closes a socket given with MHD_OPTION_LISTEN_SOCKET when it stops.
    if (daemon_) (void)listener_.release();
}

std::string MetricsServer::text() const {
    return metrics_text(sup_, sources_);
}

Status MetricsServer::attach(Supervisor& sup) {
    sup_ = &sup;
    if (auto st = watch_new_timer(sup.loop(), timer_,
                                  [this] {
                                      timer_->consume();
                                      run_daemon();
                                  });
        !st)
        return st;
    if (auto st = sup.loop().watch(epoll_fd_, EPOLLIN, [this](auto) { run_daemon(); }); !st)
        return st;
    spdlog::info("metrics: serving /metrics on {} (port {})", listen_, port_);
    return Ok{};
}

void MetricsServer::run_daemon() {
    lib_->run(static_cast<MHD_Daemon*>(daemon_));
    rearm();
}

// libmicrohttpd's own deadlines (idle connections) are met by a timer on the loop.
void MetricsServer::rearm() {
    MHD_UNSIGNED_LONG_LONG ms = 0;
    std::optional<MonoTime> next;
    if (lib_->get_timeout(static_cast<MHD_Daemon*>(daemon_), &ms) == MHD_YES)
        next = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    (void)timer_->arm(next);
}

void MetricsServer::finished(int /*exit_code*/) {
    // The port closes with the run: a scraper sees lastcall gone, not a stale last answer.
    if (!sup_ || !daemon_) return;
    sup_->loop().unwatch(epoll_fd_);
    sup_->loop().unwatch(timer_->fd());
    lib_->stop_daemon(static_cast<MHD_Daemon*>(daemon_));
    daemon_ = nullptr;
    (void)listener_.release();
}

}  // namespace lastcall
