#include "lastcall/core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace lastcall {

std::string dir_of(const std::string& path) {
    auto slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

Result<std::string> read_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return sys_error("cannot read " + path, errno);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
}

Status fsync_dir(const std::string& dir) {
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return sys_error("open directory " + dir, errno);
    if (::fsync(fd.get()) != 0) return sys_error("fsync directory " + dir, errno);
    return Ok{};
}

Result<AtomicFile> AtomicFile::create(std::string final_path, int mode) {
    std::string tmpl = final_path + ".tmp.XXXXXX";
    int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) return sys_error("create temporary file for " + final_path, errno);
    UniqueFd owned(fd);
    if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
        int err = errno;
        ::unlink(tmpl.c_str());
        return sys_error("fchmod " + tmpl, err);
    }
    return AtomicFile(std::move(final_path), std::move(tmpl), std::move(owned));
}

AtomicFile::~AtomicFile() {
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

Status AtomicFile::write(std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd_.get(), data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("write " + temp_, errno);
        }
        data.remove_prefix(static_cast<size_t>(n));
    }
    return Ok{};
}

Status AtomicFile::commit() {
    // Data before name: after a crash the final name shows either the old file or the full new one.
    if (::fsync(fd_.get()) != 0) return sys_error("fsync " + temp_, errno);
    if (::close(fd_.release()) != 0) return sys_error("close " + temp_, errno);
    if (::rename(temp_.c_str(), final_.c_str()) != 0)
        return sys_error("rename " + temp_ + " to " + final_, errno);
    committed_ = true;
    return fsync_dir(dir_of(final_));
}

}  // namespace lastcall
