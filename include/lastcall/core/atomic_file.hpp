// A file that appears at its final path complete or not at all.
//
// Writes go to a temporary file in the same directory (rename(2) is atomic only within one
// filesystem). commit() is the explicit, irreversible step: fsync the data, rename onto the final
// name, fsync the directory so the rename itself survives a power cut. Destroyed without commit(),
// the temporary file is removed and the final path is untouched.
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
    AtomicFile(std::string final_path, std::string temp, UniqueFd fd)
        : final_(std::move(final_path)), temp_(std::move(temp)), fd_(std::move(fd)) {}
    std::string final_;
    std::string temp_;
    UniqueFd fd_;
    bool committed_ = false;
};

// The whole content of a (small, text) file: configs, Procfiles, status files.
Result<std::string> read_file(const std::string& path);

// fsync of a directory, so that a rename or unlink in it is durable.
Status fsync_dir(const std::string& dir);
std::string dir_of(const std::string& path);

}  // namespace lastcall
