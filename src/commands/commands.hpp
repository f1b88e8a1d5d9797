#pragma once

#include "commands/options.hpp"

namespace rlock::commands {

// Each command returns its exit code; fatal failures are thrown as rlock::Error.

// Takes the lock, runs the child while renewing it, releases it; the child's exit code.
int run(const RunOptions& options);
// Takes the lock and leaves it held; prints or writes the token.
int acquire(const AcquireOptions& options);
// Gives the lock back (or removes it with --force).
int release(const ReleaseOptions& options);
// Resets the lock's TTL.
int extend(const ExtendOptions& options);
// Shows who holds the locks; 0 when all are held, 1 when one is free.
int status(const StatusOptions& options);
// Lists the locks under the prefix.
int list(const ListOptions& options);
// Prints the history of the locks: who held, waited, was refused, lost them.
int history(const LogOptions& options);
// A monitoring check of the locks (Nagios plugin convention): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
int check(const CheckOptions& options);
// The locks' state and outcomes in the Prometheus text exposition format.
int metrics(const MetricsOptions& options);

}  // namespace rlock::commands
