// SPDX-License-Identifier: Apache-2.0
// Batch driver for the differential test: each stdin line "EXPR<TAB>EPOCH<TAB>TZNAME[<TAB>ANCHOR]"
// prints one line with the next N fire times (epoch seconds, each after the previous one), or
// "error: <message>". An empty TZNAME means the default zone ($TZ / local time). When the
// schedule runs out of fire times the line ends with "none".
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/jobs/cron.hpp"

namespace {

std::vector<std::string_view> split_tabs(std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    while (true) {
        const std::size_t tab = line.find('\t', start);
        out.push_back(line.substr(start, tab == std::string_view::npos ? tab : tab - start));
        if (tab == std::string_view::npos) return out;
        start = tab + 1;
    }
}

bool to_int(std::string_view s, long long& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size();
}

}  // namespace

int main(int argc, char** argv) {
    using namespace lastcall::cron;
    int count = argc > 1 ? std::atoi(argv[1]) : 5;
    if (count < 1) count = 1;
    std::ios::sync_with_stdio(false);
    std::string line, out;
    while (std::getline(std::cin, line)) {
        const auto cols = split_tabs(line);
        long long start = 0, anchor = 0;
        if (cols.size() < 3 || !to_int(cols[1], start) ||
            (cols.size() > 3 && !to_int(cols[3], anchor))) {
            std::cout << "error: bad input line\n";
            continue;
        }
        lastcall::Result<TimeZone> zone =
            cols[2].empty() ? TimeZone::local() : TimeZone::load(cols[2]);
        if (!zone) {
            std::cout << "error: " << zone.error().message << '\n';
            continue;
        }
        auto parsed = parse(cols[0], *zone);
        if (!parsed) {
            std::cout << "error: " << parsed.error().message << '\n';
            continue;
        }
        const Schedule sched = parsed->anchored_at(sys_seconds{std::chrono::seconds{anchor}});
        out.clear();
        sys_seconds t{std::chrono::seconds{start}};
        for (int k = 0; k < count; ++k) {
            auto next = sched.next_after(t);
            if (!out.empty()) out += ' ';
            if (!next) {
                out += "none";
                break;
            }
            t = *next;
            out += std::to_string(t.time_since_epoch().count());
        }
        std::cout << out << '\n';
    }
    return 0;
}
