#include "lastcall/systemd/notify_proxy.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace lastcall {

namespace {

// systemd reads at most this much of a notify datagram (NOTIFY_BUFFER_MAX) and drops longer ones.
constexpr std::size_t kMaxDatagram = 4096;
// Room for the credentials and for a few descriptors someone might pass (all closed at once).
constexpr std::size_t kControlSize = CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * 16);

Status ensure_private_dir(const std::string& path) {
    if (::mkdir(path.c_str(), 0700) == 0 || errno == EEXIST) return Ok{};
    return sys_error("mkdir " + path, errno);
}

}  // namespace

std::string notify_runtime_base(const char* runtime_directory, const char* xdg_runtime_dir,
                                bool root) {
    if (runtime_directory && *runtime_directory) {
        // systemd joins several RuntimeDirectory= entries with ':'; the first one is ours.
        std::string dirs(runtime_directory);
        return dirs.substr(0, dirs.find(':'));
    }
    if (xdg_runtime_dir && *xdg_runtime_dir) return std::string(xdg_runtime_dir) + "/lastcall";
    return root ? "/run/lastcall" : "/tmp";
}

Result<std::unique_ptr<NotifyProxy>> NotifyProxy::create(const std::string& base,
                                                         std::optional<uid_t> owner_uid,
                                                         std::optional<gid_t> owner_gid) {
    if (base.ends_with("/lastcall"))
        if (auto st = ensure_private_dir(base); !st) return st.error();
    std::string tmpl = base + "/notify-XXXXXX";
    // mkdtemp makes the directory 0700: nobody else can even reach the socket inside.
    if (!::mkdtemp(tmpl.data())) return sys_error("mkdtemp " + tmpl, errno);
    std::string dir = tmpl;
    std::string path = dir + "/notify";
    auto fail = [&](Error e) -> Result<std::unique_ptr<NotifyProxy>> {
        ::unlink(path.c_str());
        ::rmdir(dir.c_str());
        return e;
    };

    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path)
        return fail(Error{"notify proxy socket path " + path + " is longer than " +
                          std::to_string(sizeof addr.sun_path - 1) + " bytes"});
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);

    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return fail(sys_error("socket AF_UNIX for the notify proxy", errno));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        return fail(sys_error("bind " + path, errno));
    int on = 1;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
        return fail(sys_error("setsockopt SO_PASSCRED on " + path, errno));
    if (owner_uid) {
        gid_t gid = owner_gid.value_or(static_cast<gid_t>(-1));
        if (::chown(dir.c_str(), *owner_uid, gid) != 0)
            return fail(sys_error("chown " + dir, errno));
        if (::chown(path.c_str(), *owner_uid, gid) != 0)
            return fail(sys_error("chown " + path, errno));
    }
    return std::unique_ptr<NotifyProxy>(new NotifyProxy(std::move(fd), dir, path));
}

NotifyProxy::~NotifyProxy() {
    // Best effort at exit: a leftover empty directory in a runtime dir is harmless.
    ::unlink(socket_path_.c_str());
    ::rmdir(dir_.c_str());
}

Result<std::optional<NotifyDatagram>> NotifyProxy::receive() {
    std::vector<char> buf(kMaxDatagram + 1);
    alignas(cmsghdr) char control[kControlSize];
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n;
    do {
        n = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC | MSG_TRUNC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return std::optional<NotifyDatagram>{};
        return sys_error("recvmsg on " + socket_path_, errno);
    }
    NotifyDatagram d;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof(ucred))) {
            ucred cred;
            std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
            d.pid = cred.pid;
        } else if (c->cmsg_type == SCM_RIGHTS) {
            std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (std::size_t i = 0; i < count; ++i) {
                int passed;
                std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
                ::close(passed);
            }
        }
    }
    d.truncated = static_cast<std::size_t>(n) > kMaxDatagram;
    d.data.assign(buf.data(), std::min(static_cast<std::size_t>(n), kMaxDatagram));
    return std::optional<NotifyDatagram>{std::move(d)};
}

}  // namespace lastcall
