// SPDX-License-Identifier: Apache-2.0
// The notify proxy reads datagrams from any process of the supervised tree, i.e. untrusted bytes;
// NOTIFY_SOCKET and WATCHDOG_USEC come from the environment. Properties: no crash on any bytes;
// an accepted datagram has no NUL and only [A-Za-z0-9_]+ keys; MAINPID is never forwardable.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lastcall/systemd/notifier.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    std::string_view bytes(reinterpret_cast<const char*>(data), size);
    if (auto fields = parse_notify_datagram(bytes)) {
        if (bytes.find('\0') != std::string_view::npos) __builtin_trap();
        for (const auto& a : fields->assignments) {
            if (a.key.empty()) __builtin_trap();
            for (char c : a.key)
                if (!(c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                      (c >= 'A' && c <= 'Z')))
                    __builtin_trap();
            if (a.key == "MAINPID" && is_forwardable_key(a.key)) __builtin_trap();
            (void)fields->find(a.key);
        }
    }
    (void)parse_notify_address(bytes);
    std::string text(bytes.substr(0, bytes.find('\0')));
    (void)watchdog_interval(text.c_str(), nullptr, 1);
    (void)watchdog_interval("1000000", text.c_str(), 1);
    return 0;
}
