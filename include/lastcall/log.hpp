// spdlog is configured once, here: text or JSON lines on stderr.
#pragma once

#include <spdlog/spdlog.h>

#include "lastcall/options.hpp"

namespace lastcall {

void setup_logging(const Options& options);

}  // namespace lastcall
