// SPDX-License-Identifier: Apache-2.0
// Cron expressions -> fire times. Pure: no clock, no globals; the only I/O is reading a zoneinfo
// file when a time zone is loaded by name. See docs/cron.md for the syntax and the DST rules.
#pragma once

#include <bitset>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"

namespace lastcall::cron {

using std::chrono::local_seconds;
using std::chrono::sys_seconds;

// Which fields an expression has. Lastcall: a `schedule =` of the TOML config (5 fields, or 6
// with leading seconds). Crontab: a crontab line, as supercronic (its cronexpr library) reads
// them: 5 fields; 6 = the 5 and a year; 7 = seconds, the 5, and a year.
enum class Fields { Lastcall, Crontab };

struct ZoneData;  // transitions + POSIX footer rule, shared and immutable once loaded

// A time zone: UTC offsets over time from a TZif file (RFC 8536) or a POSIX TZ string. Our own
// because GCC 12's libstdc++ has no std::chrono::zoned_time / tzdb. Cheap to copy (shared data).
class TimeZone {
  public:
    static TimeZone utc();
    // An IANA name ("Europe/Berlin") read from $TZDIR or /usr/share/zoneinfo. "UTC" works even
    // without a zoneinfo tree. Names with ".." or a leading '/' are refused.
    static Result<TimeZone> load(std::string_view name);
    // Parses TZif bytes; pure, for tests and for load(). `name` is only used in messages.
    static Result<TimeZone> from_tzif(std::string_view name, std::string_view bytes);
    // A POSIX TZ string such as "CET-1CEST,M3.5.0,M10.5.0/3" (as in the TZif footer).
    static Result<TimeZone> from_posix(std::string_view spec);
    // What the C library would use: $TZ (a name, ":name", ":/path" or a POSIX string; empty
    // means UTC), else /etc/localtime, else UTC.
    static Result<TimeZone> local();

    const std::string& name() const;
    std::chrono::seconds offset_at(sys_seconds t) const;
    local_seconds to_local(sys_seconds t) const {
        return local_seconds{(t + offset_at(t)).time_since_epoch()};
    }
    // The instant a wall-clock time means here. Ambiguous (fall-back) times give the first
    // occurrence; times skipped by a forward jump give the instant of the jump (the first
    // instant after the gap).
    sys_seconds resolve(local_seconds wall) const;

  private:
    friend class Schedule;  // next_after() looks at the transitions around an instant
    explicit TimeZone(std::shared_ptr<const ZoneData> data) : data_(std::move(data)) {}
    std::shared_ptr<const ZoneData> data_;
};

// A parsed expression. Either a calendar schedule (fields, in a time zone) or a fixed interval
// (@every), whose fire times are anchor + k * interval for every integer k.
class Schedule {
  public:
    // The first fire time strictly after `t`, or nullopt when there is none within 400 years
    // (a whole Gregorian cycle: parse() already refuses dates that can never occur), when the
    // year field names no year from t's on, or when `t` lies outside years 1..9999.
    std::optional<sys_seconds> next_after(sys_seconds t) const;

    // @every only: fire times are start + k * interval. The default anchor is the Unix epoch,
    // so "@every 1h" fires on the hour and a restart does not shift the phase.
    Schedule anchored_at(sys_seconds start) const;

    bool is_interval() const { return interval_.count() > 0; }
    std::chrono::seconds interval() const { return interval_; }
    const TimeZone& zone() const { return zone_; }
    const std::string& expression() const { return text_; }

  private:
    friend Result<Schedule> parse(std::string_view expr, const TimeZone* default_zone,
                                  Fields layout);
    Schedule() : zone_(TimeZone::utc()) {}

    std::optional<std::int64_t> next_wall(std::int64_t wall) const;
    bool day_matches(std::int64_t days, unsigned mday) const;
    // The first year >= y the year field allows (y itself when it has none); nullopt: none left.
    std::optional<std::int64_t> year_from(std::int64_t y) const;

    std::string text_;
    TimeZone zone_;
    std::uint64_t seconds_ = 0;  // bit n set: second n fires
    std::uint64_t minutes_ = 0;
    std::uint32_t hours_ = 0;
    std::uint32_t mdays_ = 0;   // bits 1..31
    std::uint16_t months_ = 0;  // bits 1..12
    std::uint8_t wdays_ = 0;    // bits 0..6, Sunday = 0 (7 is folded into 0)
    // Vixie cron: a day field written starting with '*' is "unrestricted"; only when both day
    // fields are restricted does either one matching suffice.
    bool mday_star_ = true;
    bool wday_star_ = true;
    // Crontab years (cronexpr's 1970-2099), bit y - 1970; only when the field is not `*`.
    bool year_star_ = true;
    std::bitset<130> years_;
    std::chrono::seconds interval_{0};
    sys_seconds anchor_{};
};

// A fire time as lastcall shows it (the log's "next run at", `lastcall jobs`): the wall-clock
// time in the schedule's zone, its offset and the zone's name,
// "2026-12-08T03:00:00+01:00[Europe/Berlin]" (core/timefmt: iso_zoned).
std::string fire_time_text(const Schedule& schedule, sys_seconds t);

// Parses "[CRON_TZ=Zone/Name ]EXPR" where EXPR is fields as `layout` says, an @macro or
// "@every DURATION". Errors name the field and the token, e.g.
// "minute field: 61 is out of range 0-59". Never throws on malformed input.
// Without CRON_TZ the zone is `default_zone`, or TimeZone::local() when that is null.
Result<Schedule> parse(std::string_view expr, const TimeZone* default_zone,
                       Fields layout = Fields::Lastcall);
inline Result<Schedule> parse(std::string_view expr) {
    return parse(expr, nullptr);
}
inline Result<Schedule> parse(std::string_view expr, const TimeZone& zone) {
    return parse(expr, &zone);
}

// How many of a crontab line's words are its schedule, decided as supercronic decides it: the
// first of 7 (seconds, the 5, a year), 6 (the 5, a year) and 5 whose words all have the shape
// cronexpr accepts for their fields and that leaves a word for the command; 1 for an @macro, 2
// for "@every D". Only the shape decides (cronexpr's value patterns: a year is 1970-2099), so a
// 7- or 6-field line with a bad value is an error of that reading, never a shorter one.
std::size_t crontab_schedule_words(const std::vector<std::string_view>& words);

}  // namespace lastcall::cron
