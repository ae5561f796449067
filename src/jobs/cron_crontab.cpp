// SPDX-License-Identifier: Apache-2.0
// A crontab line's schedule words, counted as supercronic counts them (cronexpr's shapes).
#include <algorithm>
#include <vector>

#include "cron_internal.hpp"
#include "lastcall/jobs/cron.hpp"

namespace lastcall::cron {

namespace {

// ---- cronexpr's shapes, which decide how many words of a crontab line are its schedule ----

constexpr const char* kMonthLong[] = {"january",   "february", "march",    "april",
                                      "may",       "june",     "july",     "august",
                                      "september", "october",  "november", "december"};
constexpr const char* kDayLong[] = {"sunday",   "monday", "tuesday", "wednesday",
                                    "thursday", "friday", "saturday"};

// One value as cronexpr's patterns take it: 1-2 digits within the field's range (a year: 4
// digits, 1970-2099), or for months and weekdays a three-letter or full name, any case.
bool cronexpr_value(const FieldSpec& f, std::string_view v) {
    if (!v.empty() && std::all_of(v.begin(), v.end(), is_digit)) {
        if (&f == &kYear ? v.size() != 4 : v.size() > 2) return false;
        const int n = *parse_uint(v);
        return n >= f.lo && n <= f.hi;
    }
    if (!f.names) return false;
    const bool month = &f == &kMonth;
    for (int k = 0; k < (month ? 12 : 7); ++k)
        if (iequals(v, f.names[k]) || iequals(v, month ? kMonthLong[k] : kDayLong[k])) return true;
    return false;
}

// "v" or "v-v".
bool cronexpr_span(const FieldSpec& f, std::string_view s) {
    const std::size_t dash = s.find('-');
    if (dash == std::string_view::npos) return cronexpr_value(f, s);
    return cronexpr_value(f, s.substr(0, dash)) && cronexpr_value(f, s.substr(dash + 1));
}

// One list item: "*" or "?", "v", "v-v", "*/n", "v/n", "v-v/n", and cronexpr's L, W and #
// forms (which lastcall then refuses by name: the line is still read with this many fields).
bool cronexpr_item(const FieldSpec& f, std::string_view item) {
    if (item == "*" || item == "?") return true;
    if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
        const std::string_view step = item.substr(slash + 1), base = item.substr(0, slash);
        if (step.empty() || !std::all_of(step.begin(), step.end(), is_digit)) return false;
        return base == "*" || cronexpr_span(f, base);
    }
    if (cronexpr_span(f, item)) return true;
    const auto ends_with = [&](std::string_view tail) {
        return item.size() > tail.size() && iequals(item.substr(item.size() - tail.size()), tail);
    };
    if (&f == &kMday)
        return iequals(item, "l") || iequals(item, "lw") ||
               (ends_with("w") && cronexpr_value(f, item.substr(0, item.size() - 1)));
    if (&f == &kWday) {
        if (ends_with("l")) return cronexpr_value(f, item.substr(0, item.size() - 1));
        const std::size_t hash = item.find('#');
        return hash != std::string_view::npos && hash + 2 == item.size() && item[hash + 1] >= '1' &&
               item[hash + 1] <= '5' && cronexpr_value(f, item.substr(0, hash));
    }
    return false;
}

// A field: comma-separated items (cronexpr skips empty ones, but needs one at least).
bool cronexpr_field(const FieldSpec& f, std::string_view text) {
    bool any = false;
    for (std::size_t start = 0; start <= text.size();) {
        std::size_t comma = text.find(',', start);
        if (comma == std::string_view::npos) comma = text.size();
        const std::string_view item = text.substr(start, comma - start);
        if (!item.empty() && !cronexpr_item(f, item)) return false;
        any = any || !item.empty();
        start = comma + 1;
    }
    return any;
}

}  // namespace

std::size_t crontab_schedule_words(const std::vector<std::string_view>& words) {
    if (words.empty()) return 0;
    if (words.front().front() == '@') return iequals(words.front(), "@every") ? 2 : 1;
    // supercronic tries 7, then 6, then 5 fields, and takes the first that cronexpr parses.
    static constexpr const FieldSpec* kSeven[] = {&kSecond, &kMinute, &kHour, &kMday,
                                                  &kMonth,  &kWday,   &kYear};
    for (const std::size_t n : {std::size_t{7}, std::size_t{6}}) {
        if (words.size() <= n) continue;  // no word would be left for the command
        const FieldSpec* const* spec = kSeven + (7 - n);
        bool fits = true;
        for (std::size_t k = 0; k < n && fits; ++k) fits = cronexpr_field(*spec[k], words[k]);
        if (fits) return n;
    }
    return 5;
}

}  // namespace lastcall::cron
