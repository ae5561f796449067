// SPDX-License-Identifier: Apache-2.0
// The next fire time of a schedule: the next matching wall-clock time, resolved in its zone.
#include <algorithm>
#include <bit>
#include <vector>

#include "cron_internal.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/jobs/cron.hpp"

namespace lastcall::cron {

Schedule Schedule::anchored_at(sys_seconds start) const {
    Schedule copy = *this;
    copy.anchor_ = start;
    return copy;
}

bool Schedule::day_matches(std::int64_t days, unsigned mday) const {
    const bool by_mday = (mdays_ >> mday) & 1;
    const bool by_wday = (wdays_ >> weekday_from_days(days)) & 1;
    return mday_star_ || wday_star_ ? by_mday && by_wday : by_mday || by_wday;
}

std::optional<std::int64_t> Schedule::year_from(std::int64_t y) const {
    if (year_star_) return y;
    for (std::int64_t k = std::max<std::int64_t>(y, kYear.lo); k <= kYear.hi; ++k)
        if (years_.test(static_cast<std::size_t>(k - kYear.lo))) return k;
    return std::nullopt;
}

namespace {
int next_bit(std::uint64_t mask, int from) {
    if (from >= 64) return -1;
    const std::uint64_t rest = mask & (~std::uint64_t{0} << from);
    return rest ? std::countr_zero(rest) : -1;
}
}  // namespace

// The first matching wall-clock time >= wall (seconds since the local epoch), within 400 years.
std::optional<std::int64_t> Schedule::next_wall(std::int64_t wall) const {
    std::int64_t days = floor_div(wall, kDay);
    std::int64_t sod = wall - days * kDay;
    Civil c = civil_from_days(days);
    // 400 Gregorian years repeat weekdays exactly, so a date that exists at all occurs within.
    std::int64_t limit = days + 146097 + 366;
    while (days <= limit) {
        if (const auto year = year_from(c.year); year != c.year) {
            if (!year) return std::nullopt;
            c = {*year, 1, 1};
            days = days_from_civil(c.year, 1, 1);
            limit = std::max(limit, days + 366);  // the years named may lie beyond the cycle
            sod = 0;
            continue;
        }
        if (!((months_ >> c.month) & 1)) {
            c.month = c.month == 12 ? 1 : c.month + 1;
            c.year += c.month == 1;
            c.day = 1;
            days = days_from_civil(c.year, c.month, 1);
            sod = 0;
            continue;
        }
        if (day_matches(days, c.day)) {
            const int h0 = static_cast<int>(sod / 3600), m0 = static_cast<int>(sod / 60 % 60),
                      s0 = static_cast<int>(sod % 60);
            for (int h = next_bit(hours_, h0); h >= 0; h = next_bit(hours_, h + 1)) {
                for (int m = next_bit(minutes_, h == h0 ? m0 : 0); m >= 0;
                     m = next_bit(minutes_, m + 1)) {
                    const int s = next_bit(seconds_, h == h0 && m == m0 ? s0 : 0);
                    if (s >= 0) return days * kDay + h * 3600 + m * 60 + s;
                }
            }
        }
        ++days;
        sod = 0;
        if (++c.day > days_in_month(c.year, c.month)) {
            c.day = 1;
            c.month = c.month == 12 ? 1 : c.month + 1;
            c.year += c.month == 1;
        }
    }
    return std::nullopt;
}

std::optional<sys_seconds> Schedule::next_after(sys_seconds t) const {
    const std::int64_t now = t.time_since_epoch().count();
    if (now < kMinInstant || now > kMaxInstant) return std::nullopt;
    if (is_interval()) {
        const std::int64_t iv = interval_.count();
        const std::int64_t a = anchor_.time_since_epoch().count();
        if (a < kMinInstant || a > kMaxInstant) return std::nullopt;
        return sys_seconds{std::chrono::seconds{a + (floor_div(now - a, iv) + 1) * iv}};
    }

    // Each matching wall time fires at zone_.resolve(wall), which never decreases as wall
    // grows. So the answer is resolve() of the first match at or after the first wall time
    // that resolves past `now`. That is the next second of local time, except in the second
    // pass of a fall-back hour: those wall times already fired in the first pass, so skip to
    // the end of the repeat.
    std::int64_t wall = zone_.to_local(t).time_since_epoch().count() + 1;
    auto resolved = [&](std::int64_t w) {
        return zone_.resolve(local_seconds{std::chrono::seconds{w}}).time_since_epoch().count();
    };
    if (resolved(wall) <= now) {
        std::vector<Transition> tr;
        changes(*zone_.data_, now - kWindow, now, tr);
        for (const auto& x : tr)
            if (x.before > x.after && now < x.at + (x.before - x.after))
                wall = std::max(wall, x.at + x.before);
    }
    // Bounded for safety only; with consistent zone data the first candidate is the answer.
    for (int guard = 0; guard < 100000; ++guard) {
        auto w = next_wall(wall);
        if (!w) return std::nullopt;
        const std::int64_t u = resolved(*w);
        if (u > now) {
            if (u > kMaxInstant) return std::nullopt;
            return sys_seconds{std::chrono::seconds{u}};
        }
        wall = *w + 1;
    }
    return std::nullopt;
}

std::string fire_time_text(const Schedule& schedule, sys_seconds t) {
    const TimeZone& zone = schedule.zone();
    return iso_zoned(t.time_since_epoch().count(),
                     static_cast<std::int32_t>(zone.offset_at(t).count()), zone.name());
}

}  // namespace lastcall::cron
