// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/text_table.hpp"

#include <algorithm>

namespace lastcall {

std::string format_table(const std::vector<std::vector<std::string>>& rows,
                         const std::string& indent) {
    std::vector<std::size_t> width;
    for (const auto& r : rows) {
        if (r.size() > width.size()) width.resize(r.size(), 0);
        for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    std::string out;
    for (const auto& r : rows) {
        std::string line = indent;
        for (std::size_t i = 0; i < r.size(); ++i) {
            line += r[i];
            if (i + 1 < r.size()) line.append(width[i] - r[i].size() + 2, ' ');
        }
        while (line.size() > indent.size() && line.back() == ' ') line.pop_back();
        out += line;
        out += '\n';
    }
    return out;
}

}  // namespace lastcall
