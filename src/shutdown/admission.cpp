// SPDX-License-Identifier: Apache-2.0
#include "lastcall/shutdown/admission.hpp"

#include <utility>

namespace lastcall {

std::string_view to_string(EntryPath p) {
    switch (p) {
        case EntryPath::Main:
            return "main";
        case EntryPath::ServiceStart:
            return "service_starts";
        case EntryPath::Restart:
            return "restarts";
        case EntryPath::JobFire:
            return "job_fires";
    }
    return "?";
}

Ticket::Ticket(Ticket&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      id_(other.id_),
      path_(other.path_),
      state_(other.state_) {}

Ticket& Ticket::operator=(Ticket&& other) noexcept {
    if (this != &other) {
        finish();
        owner_ = std::exchange(other.owner_, nullptr);
        id_ = other.id_;
        path_ = other.path_;
        state_ = other.state_;
    }
    return *this;
}

Ticket::~Ticket() {
    finish();
}

void Ticket::started() {
    if (owner_ && state_ == Admitted) {
        state_ = Started;
        owner_->started(path_);
    }
}

void Ticket::release() {
    finish();
}

void Ticket::rollback() {
    // Only a unit that never started can be rolled back; a started one is released.
    finish();
}

void Ticket::finish() {
    if (!owner_ || state_ == Done) return;
    bool was_started = state_ == Started;
    state_ = Done;
    std::exchange(owner_, nullptr)->finished(was_started, path_);
}

std::optional<Ticket> Admission::try_admit(EntryPath path) {
    if (!open_) {
        refuse(path);
        return std::nullopt;
    }
    auto& per = counts_.by_path[static_cast<int>(path)];
    ++active_;
    ++counts_.admitted;
    ++per.registered;
    return Ticket(this, next_id_++, path);
}

void Admission::refuse(EntryPath path) {
    if (open_) return;
    ++counts_.refused;
    ++counts_.by_path[static_cast<int>(path)].refused;
}

void Admission::started(EntryPath path) {
    ++counts_.by_path[static_cast<int>(path)].executing;
}

std::size_t Admission::close() {
    open_ = false;
    return active_;
}

bool Admission::is_open() const {
    return open_;
}

std::size_t Admission::active() const {
    return active_;
}

AdmissionStats Admission::stats() const {
    AdmissionStats s = counts_;
    s.active = active_;
    s.open = open_;
    return s;
}

void Admission::finished(bool was_started, EntryPath path) {
    --active_;
    auto& per = counts_.by_path[static_cast<int>(path)];
    if (was_started) {
        ++counts_.released;
        --per.executing;
        ++per.released;
    } else {
        ++counts_.rolled_back;
        ++per.rolled_back;
    }
}

}  // namespace lastcall
