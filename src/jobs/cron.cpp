// SPDX-License-Identifier: Apache-2.0
// Cron expressions: their fields, @every and the @macros, and parse(); the time zones are in
// cron_zone.cpp, the next fire time in cron_next.cpp, a crontab line's words in cron_crontab.cpp.
#include "lastcall/jobs/cron.hpp"

#include "lastcall/core/duration.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cron_internal.hpp"

namespace lastcall::cron {

namespace {

std::string field_error(const FieldSpec& f, const std::string& what) {
    return std::string(f.name) + " field: " + what;
}

std::string quoted(std::string_view s) {
    return "'" + std::string(s) + "'";
}

// One value: a number or (month / day-of-week only) a three-letter name. The message has no
// field prefix so that range errors can wrap it.
Result<int> parse_value(const FieldSpec& f, std::string_view tok) {
    if (tok.empty()) return fail("missing value");
    if (is_digit(tok.front())) {
        auto v = parse_uint(tok);
        if (!v) return fail(quoted(tok) + " is not a number");
        if (*v < f.lo || *v > f.hi)
            return fail(std::string(tok) + " is out of range " + std::to_string(f.lo) + "-" +
                        std::to_string(f.hi));
        return *v;
    }
    if (f.names) {
        const int count = &f == &kMonth ? 12 : 7;
        for (int k = 0; k < count; ++k)
            if (iequals(tok, f.names[k])) return f.lo + k;
        return fail("unknown name " + quoted(tok));
    }
    return fail(quoted(tok) + " is not a number");
}

// A comma-separated list of "*", "v", "a-b", each optionally "/step": mark(v) for each value v
// it lists.
template <class Mark>
Status parse_items(const FieldSpec& f, std::string_view text, Mark&& mark) {
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t comma = text.find(',', start);
        if (comma == std::string_view::npos) comma = text.size();
        const std::string_view item = text.substr(start, comma - start);
        start = comma + 1;
        if (item.empty()) return fail(field_error(f, "empty list item in " + quoted(text)));

        std::string_view base = item;
        int step = 1;
        bool stepped = false;
        if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
            base = item.substr(0, slash);
            const std::string_view st = item.substr(slash + 1);
            auto v = parse_uint(st);
            if (!v) return fail(field_error(f, "bad step " + quoted(st) + " in " + quoted(item)));
            const int span = f.hi - f.lo + 1;
            if (*v < 1 || *v > span)
                return fail(field_error(f, "step " + std::string(st) + " in " + quoted(item) +
                                               " is out of range 1-" + std::to_string(span)));
            step = *v;
            stepped = true;
        }
        int lo, hi;
        if (base == "*") {
            lo = f.lo, hi = f.hi;
        } else if (const std::size_t dash = base.find('-'); dash != std::string_view::npos) {
            auto a = parse_value(f, base.substr(0, dash));
            if (!a) return fail(field_error(f, "range " + quoted(item) + ": " + a.error().message));
            auto b = parse_value(f, base.substr(dash + 1));
            if (!b) return fail(field_error(f, "range " + quoted(item) + ": " + b.error().message));
            lo = *a, hi = *b;
            // "FRI-SUN": Sunday closing a range means 7, as in croniter and most crons.
            if (&f == &kWday && hi == 0 && lo > 0) hi = 7;
            if (lo > hi) return fail(field_error(f, "range " + quoted(item) + " is reversed"));
        } else {
            auto v = parse_value(f, base);
            if (!v) return fail(field_error(f, v.error().message));
            lo = *v;
            hi = stepped ? f.hi : *v;  // "a/n" means a, a+n, ... up to the field's maximum
        }
        for (int v = lo; v <= hi; v += step) mark(v);
        if (comma == text.size()) break;
    }
    return Ok{};
}

// Bit v set = v matches.
Result<std::uint64_t> parse_field(const FieldSpec& f, std::string_view text) {
    std::uint64_t bits = 0;
    auto st = parse_items(f, text, [&](int v) { bits |= std::uint64_t{1} << v; });
    if (!st) return st.error();
    return bits;
}

// "@every" durations: lastcall's one duration grammar (core/duration) with days (24 h, not
// calendar days) and a bound of a century, in whole seconds.
Result<std::int64_t> parse_interval(std::string_view text) {
    const std::string what = "@every: ";
    if (text.empty()) return fail(what + "missing duration (e.g. @every 30s, @every 1h30m)");
    DurationGrammar grammar{.days = true, .max_seconds = 100 * 366 * kDay, .max_text = "100 years"};
    auto d = parse_duration(text, grammar);
    if (!d) return fail(what + d.error().message);
    if (d->count() % 1000 != 0)
        return fail(what + "sub-second intervals are not supported: " + quoted(text));
    if (d->count() == 0) return fail(what + "interval must be positive: " + quoted(text));
    return d->count() / 1000;
}

struct Macro {
    const char* name;
    const char* fields;
};
constexpr Macro kMacros[] = {
    {"@yearly", "0 0 0 1 1 *"}, {"@annually", "0 0 0 1 1 *"}, {"@monthly", "0 0 0 1 * *"},
    {"@weekly", "0 0 0 * * 0"}, {"@daily", "0 0 0 * * *"},    {"@midnight", "0 0 0 * * *"},
    {"@hourly", "0 0 * * * *"},
};

// "CRON_TZ=Zone/Name " (or "TZ=") before the expression: its zone, with `rest` moved past it.
Result<std::optional<TimeZone>> zone_prefix(std::string_view& rest) {
    for (std::string_view prefix : {"CRON_TZ=", "TZ="}) {
        if (rest.size() >= prefix.size() && iequals(rest.substr(0, prefix.size()), prefix)) {
            std::size_t end = prefix.size();
            while (end < rest.size() && !is_space(rest[end])) ++end;
            const std::string_view name = rest.substr(prefix.size(), end - prefix.size());
            if (name.empty()) return fail(std::string(prefix) + " needs a zone name");
            auto z = TimeZone::load(name);
            if (!z)
                return fail(std::string(prefix.substr(0, prefix.size() - 1)) + ": " +
                            z.error().message);
            rest = trim(rest.substr(end));
            return std::optional<TimeZone>(*z);
        }
    }
    return std::optional<TimeZone>();
}

// The fields an @macro other than @every stands for; `words` counts it and what follows it.
Result<std::string_view> macro_fields(std::string_view macro, std::size_t words,
                                      std::string_view rest) {
    const Macro* found = nullptr;
    for (const auto& m : kMacros)
        if (iequals(macro, m.name)) found = &m;
    if (!found) {
        if (iequals(macro, "@reboot"))
            return fail("@reboot is not a schedule; start the job with the supervisor instead");
        return fail("unknown macro " + quoted(macro));
    }
    if (words != 1) return fail(std::string(found->name) + " takes no fields, got " + quoted(rest));
    return std::string_view(found->fields);
}

// The fields as `layout` has them, checked for their count and made seven: seconds, the 5, a year.
Status normalise_fields(std::vector<std::string_view>& fields, Fields layout) {
    const bool crontab = layout == Fields::Crontab;
    if (fields.size() != 5 && fields.size() != 6 && !(crontab && fields.size() == 7))
        return fail("expected 5 fields (minute hour day-of-month month day-of-week), " +
                    std::string(crontab ? "6 with a year last, 7 with seconds first and a year last"
                                        : "6 with leading seconds") +
                    ", or an @macro; got " + std::to_string(fields.size()));
    // Normalised to seconds, the 5, and a year: the 5 fire at second 0 in any year, a crontab's
    // 6 end in the year, lastcall's 6 start with the second.
    if (fields.size() == 5 || (crontab && fields.size() == 6)) fields.insert(fields.begin(), "0");
    if (fields.size() == 6) fields.push_back("*");
    return Ok{};
}

// Whether a day of `mdays` occurs in a month of `months` (their bits as in Schedule).
bool day_occurs(std::uint16_t months, std::uint32_t mdays) {
    bool possible = false;
    for (unsigned m = 1; m <= 12; ++m)
        if ((months >> m) & 1)
            for (unsigned d = 1; d <= days_in_month(2000, m); ++d)  // 2000: leap year
                possible = possible || ((mdays >> d) & 1);
    return possible;
}

}  // namespace

Result<Schedule> parse(std::string_view expr, const TimeZone* default_zone, Fields layout) {
    Schedule s;
    std::string_view rest = trim(expr);
    s.text_ = std::string(rest);

    auto prefixed = zone_prefix(rest);
    if (!prefixed) return prefixed.error();
    const std::optional<TimeZone> zone = *prefixed;
    if (rest.empty()) return fail("empty cron expression");

    std::vector<std::string_view> fields = split_ws(rest);
    if (fields.front().front() == '@') {
        const std::string_view macro = fields.front();
        if (iequals(macro, "@every")) {
            if (fields.size() != 2) return fail("@every takes one duration, e.g. '@every 1h30m'");
            auto iv = parse_interval(fields[1]);
            if (!iv) return iv.error();
            s.interval_ = std::chrono::seconds{*iv};
            if (zone) s.zone_ = *zone;  // irrelevant to intervals, kept for display
            return s;
        }
        auto expanded = macro_fields(macro, fields.size(), rest);
        if (!expanded) return expanded.error();
        fields = split_ws(*expanded);
        layout = Fields::Lastcall;  // a macro's fields start with the second
    }
    if (auto st = normalise_fields(fields, layout); !st) return st.error();

    const FieldSpec* specs[] = {&kSecond, &kMinute, &kHour, &kMday, &kMonth, &kWday};
    std::uint64_t bits[6];
    for (int k = 0; k < 6; ++k) {
        auto b = parse_field(*specs[k], fields[static_cast<std::size_t>(k)]);
        if (!b) return b.error();
        bits[k] = *b;
    }
    s.year_star_ = fields[6] == "*";
    if (!s.year_star_) {
        auto st = parse_items(kYear, fields[6], [&](int y) { s.years_.set(y - kYear.lo); });
        if (!st) return st.error();
    }
    s.seconds_ = bits[0];
    s.minutes_ = bits[1];
    s.hours_ = static_cast<std::uint32_t>(bits[2]);
    s.mdays_ = static_cast<std::uint32_t>(bits[3]);
    s.months_ = static_cast<std::uint16_t>(bits[4]);
    s.wdays_ = static_cast<std::uint8_t>((bits[5] | (bits[5] >> 7)) & 0x7f);  // 7 -> Sunday
    s.mday_star_ = fields[3].front() == '*';
    s.wday_star_ = fields[5].front() == '*';

    // When the day fields combine with AND, a date that never exists ("30 FEB") would make
    // next_after search in vain; refuse it here. (With OR, the weekday alone always matches.)
    if ((s.mday_star_ || s.wday_star_) && !day_occurs(s.months_, s.mdays_))
        return fail("day-of-month field: " + quoted(fields[3]) + " never occurs in the months of " +
                    quoted(fields[4]));
    // A year field can rule out every date the other fields allow (29 FEB 2027).
    if (!s.year_star_) {
        const std::int64_t first = *s.year_from(kYear.lo);
        if (!s.next_wall(days_from_civil(first, 1, 1) * kDay))
            return fail("year field: " + quoted(fields[6]) + " has no date that the other fields " +
                        "allow");
    }

    if (zone) {
        s.zone_ = *zone;
    } else if (default_zone) {
        s.zone_ = *default_zone;
    } else {
        auto local = TimeZone::local();
        if (!local) return local.error();
        s.zone_ = *local;
    }
    return s;
}

}  // namespace lastcall::cron
