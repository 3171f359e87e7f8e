// `pagoda bench` subcommands (one file each) and what they share: peak
// memory, medians, the roofline as JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/commands.h"
#include "ops/roofline.h"

namespace pagoda::cli {

Runner add_bench_throughput(CLI::App& bench);
Runner add_bench_roofline(CLI::App& bench);
Runner add_bench_latency(CLI::App& bench);

// Peak resident set of this process so far (getrusage), and the current one.
int64_t peak_rss_bytes();
int64_t current_rss_bytes();

// Median of a non-empty list.
double median(std::vector<double> v);

nlohmann::json roofline_json(const ops::Roofline& r);

}  // namespace pagoda::cli
