// SPDX-License-Identifier: Apache-2.0
// --metrics-file: lastcall's figures in the Prometheus text format (version 0.0.4), written
// atomically so that node_exporter's textfile collector never reads half a file.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lastcall/core/error.hpp"

namespace lastcall {

class MetricsWriter {
  public:
    using Labels = std::vector<std::pair<std::string, std::string>>;
    // One sample of the family `name` (HELP and TYPE are written once per family, from the
    // first call). type: "gauge" or "counter".
    void sample(const std::string& name, const char* type, const std::string& help,
                const Labels& labels, double value);
    // The exposition text: families in name order, samples in the order given.
    std::string text() const;

  private:
    struct Family {
        std::string type, help;
        std::vector<std::string> lines;
    };
    std::map<std::string, Family> families_;
};

// Writes the text to `path` atomically (temporary file, fsync, rename); the directory must exist.
Status write_metrics_file(const std::string& path, const std::string& text);

}  // namespace lastcall

#include <optional>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/event_loop.hpp"
#include "lastcall/supervisor/supervisor.hpp"

namespace lastcall {

// How a run ended, for the last metrics: the facts of the shutdown report.
struct Ending {
    std::string verdict;  // "clean" or "forced"
    int exit_code = 0;
    std::optional<double> shutdown_seconds;  // trigger to Stopped; none without a shutdown
    int processes = 0;                       // in the final tree
    int signalled = 0;                       // sent the stop signal
    int killed = 0;                          // forced with SIGKILL
};

// The exposition text of this moment: lastcall's own figures, the ending once there is one, and
// what each source contributes (SupervisorComponent::contribute_metrics). sup may be null.
std::string metrics_text(const Supervisor* sup, const std::vector<SupervisorComponent*>& sources);

// The --metrics-file component: writes the file at start, a second later (once the services have
// started), then every `interval` while running, and a last time at the end with how the run
// ended. What to say comes from the other components
// (SupervisorComponent::contribute_metrics) and from the supervisor's Ending.
class MetricsFile final : public SupervisorComponent {
  public:
    MetricsFile(std::string path, std::vector<SupervisorComponent*> sources, const Clock& clock,
                Millis interval = Millis{15000});
    Status attach(Supervisor& sup) override;
    void finished(int exit_code) override;

  private:
    void write();
    void on_timer();

    std::string path_;
    std::vector<SupervisorComponent*> sources_;
    const Clock& clock_;
    Millis interval_;
    Supervisor* sup_ = nullptr;
    std::optional<DeadlineTimer> timer_;
    bool failing_ = false;  // a write failure is said once per streak
};

}  // namespace lastcall
