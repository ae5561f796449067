// SPDX-License-Identifier: Apache-2.0
#include "lastcall/systemd/notify_proxy.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "lastcall/core/safe_path.hpp"

namespace lastcall {

namespace {

// systemd reads at most this much of a notify datagram (NOTIFY_BUFFER_MAX) and drops longer ones.
constexpr std::size_t kMaxDatagram = 4096;
// Room for the credentials and for a few descriptors someone might pass (all closed at once).
constexpr std::size_t kControlSize = CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * 16);

// The base directory as a descriptor. One lastcall made itself must be its own; with a unit
// user it must also be traversable (0711) or the child gets EACCES on its READY=1.
Result<UniqueFd> open_base(const std::string& base, bool for_other_user) {
    if (!base.ends_with("/lastcall")) return open_dir_safely(base);
    auto fd = ensure_owned_dir(base, 0711, false);
    if (!fd) return fd.error();
    struct stat st {};
    if (for_other_user && ::fstat(fd->get(), &st) == 0 && (st.st_mode & 0011) != 0011 &&
        ::fchmod(fd->get(), (st.st_mode & 07777) | 0011) != 0)
        return sys_error("fchmod " + base, errno);
    return fd;
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
    auto based = open_base(base, owner_uid.has_value());
    if (!based) return based.error();
    UniqueFd base_fd = std::move(*based);
    // mkdtemp, through the base's descriptor.
    std::string name;
    for (int attempt = 0;; ++attempt) {
        unsigned char rnd[6];
        if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd))
            return sys_error("getrandom", errno);
        static constexpr char kChars[] =
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        name = "notify-";
        for (unsigned char c : rnd) name += kChars[c % 62];
        if (::mkdirat(base_fd.get(), name.c_str(), 0700) == 0) break;
        if (errno != EEXIST || attempt > 100) return sys_error("mkdir " + base + "/" + name, errno);
    }
    std::string dir = (base == "/" ? "" : base) + "/" + name;
    std::string path = dir + "/notify";
    UniqueFd dir_fd(open_beneath(base_fd.get(), name, O_RDONLY | O_DIRECTORY));
    auto fail = [&](Error e) -> Result<std::unique_ptr<NotifyProxy>> {
        if (dir_fd) ::unlinkat(dir_fd.get(), "notify", 0);
        ::unlinkat(base_fd.get(), name.c_str(), AT_REMOVEDIR);
        return e;
    };
    if (!dir_fd) return fail(sys_error("open " + dir, errno));
    // The name could have been replaced between mkdirat and the open if others can write the
    // base: only the directory lastcall made (its own, 0700) is used.
    struct stat st {};
    if (::fstat(dir_fd.get(), &st) != 0) return fail(sys_error("fstat " + dir, errno));
    if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
        return fail(Error{dir + " was replaced while it was being set up"});

    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path)
        return fail(Error{"notify proxy socket path " + path + " is longer than " +
                          std::to_string(sizeof addr.sun_path - 1) + " bytes"});
    // bind() takes a path: this one goes through the directory's descriptor, so the socket lands
    // in the directory checked above whatever happens to the names meanwhile.
    std::string via_fd = "/proc/self/fd/" + std::to_string(dir_fd.get()) + "/notify";
    const std::string& bind_path = ::access("/proc/self/fd", F_OK) == 0 ? via_fd : path;
    std::memcpy(addr.sun_path, bind_path.c_str(), bind_path.size() + 1);

    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return fail(sys_error("socket AF_UNIX for the notify proxy", errno));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        return fail(sys_error("bind " + path, errno));
    int on = 1;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
        return fail(sys_error("setsockopt SO_PASSCRED on " + path, errno));
    if (owner_uid) {
        // Sending needs write permission on the socket. The directory is still root's 0700, so
        // nothing else can be at this name yet; after the fchown below lastcall never touches
        // anything in it by name again (only the unlinkat at exit, which follows no link).
        if (::fchmodat(dir_fd.get(), "notify", 0666, 0) != 0)
            return fail(sys_error("chmod " + path, errno));
        gid_t gid = owner_gid.value_or(static_cast<gid_t>(-1));
        if (::fchown(dir_fd.get(), *owner_uid, gid) != 0)
            return fail(sys_error("fchown " + dir, errno));
    }
    return std::unique_ptr<NotifyProxy>(
        new NotifyProxy(std::move(fd), std::move(base_fd), name, std::move(dir_fd), path));
}

NotifyProxy::~NotifyProxy() {
    // Best effort at exit: a leftover empty directory in a runtime dir is harmless.
    ::unlinkat(dir_.get(), "notify", 0);
    ::unlinkat(base_.get(), dir_name_.c_str(), AT_REMOVEDIR);
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
