// SPDX-License-Identifier: Apache-2.0
// Batch driver for the JSON differential test: each stdin line is the hex of a byte string; each
// output line is that string as lastcall's JSON writer quotes it
// (tests/e2e/test_json_differential.py parses it with Python's json module and compares with
// Python's own decoding).
#include <iostream>
#include <string>

#include "lastcall/core/json.hpp"

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::string bytes;
        for (std::size_t i = 0; i + 1 < line.size(); i += 2)
            bytes += static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16));
        std::string out;
        lastcall::json_quote(out, bytes);
        std::cout << out << '\n';
    }
    return 0;
}
