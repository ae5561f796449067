// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/unit_output.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "lastcall/core/utf8.hpp"

namespace lastcall {

namespace {

constexpr const char* kColors[] = {"36", "33", "32", "35", "34", "31",
                                   "96", "93", "92", "95", "94", "91"};

}  // namespace

bool UnitOutput::color_for(int fd) {
    const char* no_color = std::getenv("NO_COLOR");
    return ::isatty(fd) == 1 && !(no_color && *no_color);
}

void UnitOutput::add_name(std::string_view name) {
    if (std::find(names_.begin(), names_.end(), name) != names_.end()) return;
    names_.emplace_back(name);
    width_ = std::max(width_, name.size());
}

void UnitOutput::attach(Watch watch, Unwatch unwatch) {
    if (!opened_) out_.open();
    opened_ = true;
    if (watch_) return;
    watch_ = std::move(watch);
    unwatch_ = std::move(unwatch);
}

Result<UnitOutput::Capture> UnitOutput::capture(const std::string& name) {
    if (!watch_) return Error{"output of " + name + ": not attached to the loop"};
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        return Error{"output of " + name + ": pipe2: " + std::strerror(errno)};
    UniqueFd read_end(fds[0]);
    Capture c{UniqueFd(fds[1]), fds[0]};
    if (::fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0)
        return Error{"output of " + name + ": fcntl O_NONBLOCK: " + std::strerror(errno)};
    int raw = fds[0];
    if (auto st = watch_(raw, [this, raw] { read_some(raw, kPerTurn); }); !st)
        return Error{"output of " + name + ": " + st.error().message};
    streams_[raw] = Stream{name, std::move(read_end), {}};
    return c;
}

void UnitOutput::drain(int stream) {
    if (streams_.count(stream)) read_some(stream, SIZE_MAX);
}

void UnitOutput::read_some(int fd, std::size_t budget) {
    auto it = streams_.find(fd);
    if (it == streams_.end()) return;
    Stream& st = it->second;
    char buf[16384];
    for (std::size_t taken = 0; taken < budget; taken += sizeof buf) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
            st.partial.append(buf, static_cast<std::size_t>(n));
            std::size_t begin = 0, nl;
            while ((nl = st.partial.find('\n', begin)) != std::string::npos) {
                emit(st.name, std::string_view(st.partial).substr(begin, nl - begin));
                begin = nl + 1;
            }
            st.partial.erase(0, begin);
            if (st.partial.size() > kMaxLine) {
                emit(st.name, st.partial);
                st.partial.clear();
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        // EOF: the unit and everything it started closed the pipe.
        if (!st.partial.empty()) emit(st.name, st.partial);
        if (unwatch_) unwatch_(fd);
        streams_.erase(it);
        return;
    }
}

void UnitOutput::say(std::string_view name, std::string_view text) {
    emit(name, text);
}

void UnitOutput::emit(std::string_view name, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string out;
    out.reserve(line.size() + width_ + 16);
    std::string padded(name);
    if (padded.size() < width_) padded.append(width_ - padded.size(), ' ');
    if (color_) {
        auto at = std::find(names_.begin(), names_.end(), name);
        auto index = static_cast<std::size_t>(std::distance(names_.begin(), at));
        out += "\x1b[";
        out += kColors[index % std::size(kColors)];
        out += "m" + padded + " |\x1b[0m ";
    } else {
        out += padded + " | ";
    }
    append_printable(out, line);
    out += '\n';
    out_.write_line(out);
}

std::uint64_t UnitOutput::finish(std::chrono::milliseconds max_wait) {
    // Whatever the last processes wrote before they went is printed before lastcall exits.
    std::vector<int> fds;
    for (const auto& [fd, st] : streams_) fds.push_back(fd);
    for (int fd : fds) read_some(fd, SIZE_MAX);
    out_.flush(max_wait);
    if (finished_) return 0;
    finished_ = true;
    return out_.lost();
}

}  // namespace lastcall
