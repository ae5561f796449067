// SPDX-License-Identifier: Apache-2.0
// The notify proxy's socket: lastcall's own AF_UNIX datagram socket that the child finds in its
// NOTIFY_SOCKET. It lives in a private 0700 directory, and every datagram carries the sender's pid
// (SO_PASSCRED), so the notifier can refuse anything that does not come from the supervised tree.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"

namespace lastcall {

// The directory under which the proxy makes its private directory: $RUNTIME_DIRECTORY (its first
// entry), else $XDG_RUNTIME_DIR/lastcall, else /run/lastcall for root, else /tmp. Pure.
std::string notify_runtime_base(const char* runtime_directory, const char* xdg_runtime_dir,
                                bool root);

struct NotifyDatagram {
    pid_t pid = 0;  // from SCM_CREDENTIALS; 0 when the sender's pid was not passed
    std::string data;
    bool truncated = false;  // larger than systemd's limit: refused as systemd refuses it
};

class NotifyProxy {
  public:
    // Makes <base>/notify-XXXXXX (0700) and binds <dir>/notify there, all through directory
    // descriptors. With owner_uid (--user), the directory is handed over with fchown on its
    // descriptor, never by path, after the socket is in place (mode 0666 inside a directory
    // only that user can enter); a <base> lastcall made itself (/run/lastcall) is 0711 so that
    // user can reach it without listing it.
    static Result<std::unique_ptr<NotifyProxy>> create(const std::string& base,
                                                       std::optional<uid_t> owner_uid,
                                                       std::optional<gid_t> owner_gid);
    NotifyProxy(const NotifyProxy&) = delete;
    NotifyProxy& operator=(const NotifyProxy&) = delete;
    // Removes the socket and its directory.
    ~NotifyProxy();

    const std::string& socket_path() const { return socket_path_; }
    int fd() const { return fd_.get(); }
    // The next pending datagram, or nullopt when none is left (EAGAIN). Any descriptors a sender
    // passed along are closed at once: the proxy relays no file descriptors.
    Result<std::optional<NotifyDatagram>> receive();

  private:
    NotifyProxy(UniqueFd fd, UniqueFd base, std::string dir_name, UniqueFd dir,
                std::string socket_path)
        : fd_(std::move(fd)),
          base_(std::move(base)),
          dir_name_(std::move(dir_name)),
          dir_(std::move(dir)),
          socket_path_(std::move(socket_path)) {}
    UniqueFd fd_;
    UniqueFd base_;
    std::string dir_name_;
    UniqueFd dir_;
    std::string socket_path_;
};

}  // namespace lastcall
