// SPDX-License-Identifier: Apache-2.0
// A file that appears at its final path complete or not at all.
//
// Writes go to a temporary file in the same directory (rename(2) is atomic only within one
// filesystem). commit() is the explicit, irreversible step: fsync the data, rename onto the final
// name, fsync the directory so the rename itself survives a power cut. Destroyed without commit(),
// the temporary file is removed and the final path is untouched.
//
// lastcall writes these as root into directories an unprivileged app may share (a report in
// /tmp, a volume): the directory is opened once with open_dir_safely() (safe_path.hpp) and the
// temporary file is created in it with O_EXCL | O_NOFOLLOW, renamed and removed through that
// descriptor, so no planted or swapped link can redirect the write.
#pragma once

#include <string>
#include <string_view>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"

namespace lastcall {

class AtomicFile {
  public:
    static Result<AtomicFile> create(std::string final_path, int mode = 0644);
    AtomicFile(AtomicFile&&) = default;
    AtomicFile& operator=(AtomicFile&&) = default;
    ~AtomicFile();

    Status write(std::string_view data);
    Status commit();
    const std::string& temp_path() const { return temp_; }

  private:
    AtomicFile(std::string final_path, std::string temp, UniqueFd dir, std::string final_name,
               std::string temp_name, UniqueFd fd)
        : final_(std::move(final_path)),
          temp_(std::move(temp)),
          dir_(std::move(dir)),
          final_name_(std::move(final_name)),
          temp_name_(std::move(temp_name)),
          fd_(std::move(fd)) {}
    std::string final_;
    std::string temp_;
    UniqueFd dir_;
    std::string final_name_;
    std::string temp_name_;
    UniqueFd fd_;
    bool committed_ = false;
};

// fsync of a directory, so that a rename or unlink in it is durable.
Status fsync_dir(const std::string& dir);
std::string dir_of(const std::string& path);

}  // namespace lastcall
