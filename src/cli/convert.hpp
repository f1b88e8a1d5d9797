#pragma once

#include "cli/settings.hpp"
#include "commands/options.hpp"

namespace rlock::cli {

// Each command's options from the settings: values checked, defaults applied, files read. Errors
// name where the bad value came from (option, variable or config file) and exit 64 or 78.
commands::OutputOptions output_options(Parsed& p);
commands::ConnectOptions connect_options(Parsed& p);
commands::RunOptions run_options(Parsed& p);
commands::AcquireOptions acquire_options(Parsed& p, bool stdout_closed);
commands::ReleaseOptions release_options(Parsed& p);
commands::ExtendOptions extend_options(Parsed& p);
commands::StatusOptions status_options(Parsed& p);
commands::ListOptions list_options(Parsed& p);
commands::LogOptions log_options(Parsed& p);
commands::CheckOptions check_options(Parsed& p);
commands::MetricsOptions metrics_options(Parsed& p);

}  // namespace rlock::cli
