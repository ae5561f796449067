// SPDX-License-Identifier: Apache-2.0
// The clock behind every deadline. Escalation tests drive a FakeClock instead of sleeping.
#pragma once

#include <chrono>

namespace lastcall {

using MonoTime = std::chrono::steady_clock::time_point;

class Clock {
  public:
    virtual ~Clock() = default;
    virtual MonoTime now() const = 0;
};

class SteadyClock final : public Clock {
  public:
    MonoTime now() const override { return std::chrono::steady_clock::now(); }
};

class FakeClock final : public Clock {
  public:
    MonoTime now() const override { return now_; }
    void advance(std::chrono::steady_clock::duration d) { now_ += d; }

  private:
    MonoTime now_{std::chrono::hours(1)};
};

}  // namespace lastcall
