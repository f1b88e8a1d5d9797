# fish completion for rlock(1), a distributed lock for shell scripts kept in Redis.
# Install as /usr/share/fish/vendor_completions.d/rlock.fish.

# The subcommand on the command line, or nothing.
function __rlock_subcommand
    set -l tokens (commandline -opc)
    for t in $tokens[2..-1]
        switch $t
            case '-*'
                continue
            case '*'
                echo $t
                return 0
        end
    end
    return 1
end

# True when no subcommand has been given yet.
function __rlock_needs_subcommand
    not __rlock_subcommand >/dev/null
end

# True when the subcommand is one of the arguments, and (for run) the
# cursor is not in the child command after "--".
function __rlock_using
    set -l sub (__rlock_subcommand)
    or return 1
    contains -- $sub $argv
    or return 1
    not __rlock_in_child
end

# True when the cursor is after the "--" of "rlock run KEY ... --".
function __rlock_in_child
    set -l tokens (commandline -opc)
    set -l sub (__rlock_subcommand)
    test "$sub" = run
    and contains -- -- $tokens[3..-1]
end

# Completions for the child command line after "--".
function __rlock_complete_child
    set -l tokens (commandline -opc)
    set -l i (contains -i -- -- $tokens)
    set -l child (string escape -- $tokens[(math $i + 1)..-1])
    complete -C (string trim -l -- "$child "(commandline -ct))
end

complete -c rlock -f

# Subcommands.
complete -c rlock -n __rlock_needs_subcommand -a run -d 'Run a command while holding a lock'
complete -c rlock -n __rlock_needs_subcommand -a acquire -d 'Take a lock and keep it after rlock exits'
complete -c rlock -n __rlock_needs_subcommand -a release -d 'Give a lock back (token required)'
complete -c rlock -n __rlock_needs_subcommand -a extend -d 'Reset the TTL of a lock (token required)'
complete -c rlock -n __rlock_needs_subcommand -a status -d 'Show who holds locks'
complete -c rlock -n __rlock_needs_subcommand -a list -d 'List the locks under the prefix'

# Top level.
complete -c rlock -n __rlock_needs_subcommand -s h -l help -d 'Print help and exit'
complete -c rlock -n __rlock_needs_subcommand -s V -l version -d 'Print version and exit'

# Options of every subcommand.
set -l __rlock_all 'run acquire release extend status list'
complete -c rlock -n "__rlock_using $__rlock_all" -s h -l help -d 'Print help and exit'
complete -c rlock -n "__rlock_using $__rlock_all" -s V -l version -d 'Print version and exit'
complete -c rlock -n "__rlock_using $__rlock_all" -s u -l url -x -a 'redis:// rediss:// unix:// redis+sentinel://' -d 'Redis URL'
complete -c rlock -n "__rlock_using $__rlock_all" -l connect-timeout -x -d 'Connect timeout (duration)'
complete -c rlock -n "__rlock_using $__rlock_all" -l timeout -x -d 'Per-command timeout (duration)'
complete -c rlock -n "__rlock_using $__rlock_all" -l prefix -x -d 'Key namespace'
complete -c rlock -n "__rlock_using $__rlock_all" -l password-file -r -F -d 'Read the Redis password from this file (first line)'
complete -c rlock -n "__rlock_using $__rlock_all" -l cacert -r -F -d 'CA certificates for rediss://'
complete -c rlock -n "__rlock_using $__rlock_all" -l cert -r -F -d 'Client certificate for rediss://'
complete -c rlock -n "__rlock_using $__rlock_all" -l key -r -F -d 'Client certificate key for rediss:// (env RLOCK_TLS_KEY)'
complete -c rlock -n "__rlock_using $__rlock_all" -l insecure -d 'Do not verify the server certificate'
complete -c rlock -n "__rlock_using $__rlock_all" -l config -r -F -d 'TOML configuration file'
complete -c rlock -n "__rlock_using $__rlock_all" -s q -l quiet -d 'Print nothing but errors'
complete -c rlock -n "__rlock_using $__rlock_all" -s v -l verbose -d 'Print a timestamped timeline on stderr'

# Taking a lock: run, acquire.
complete -c rlock -n '__rlock_using run acquire' -s t -l ttl -x -d 'Lease length (duration)'
complete -c rlock -n '__rlock_using run acquire' -s w -l wait -x -d 'Wait at most this long (duration)'
complete -c rlock -n '__rlock_using run acquire' -s n -l no-wait -d 'Fail at once if the lock is held'
complete -c rlock -n '__rlock_using run acquire' -s E -l conflict-exit-code -x -d 'Exit code when busy or the wait timed out'
complete -c rlock -n '__rlock_using run acquire' -l wait-replicas -x -d 'After acquiring, wait for N replicas to acknowledge'
complete -c rlock -n '__rlock_using run acquire' -l wait-timeout -x -d 'How long --wait-replicas waits (duration)'

# run only.
complete -c rlock -n '__rlock_using run' -s c -l command -x -d 'Run this string with /bin/sh -c'
complete -c rlock -n '__rlock_using run' -l signal -x -a 'TERM INT HUP QUIT USR1 USR2 KILL ALRM SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2 SIGKILL SIGALRM' -d 'Signal sent to the child when the lock is lost'
complete -c rlock -n '__rlock_using run' -l kill-after -x -d 'Send SIGKILL this long after the signal'
complete -c rlock -n '__rlock_using run' -l lost-exit-code -x -d 'Exit code when the lock was lost'
complete -c rlock -n '__rlock_using run' -l max-hold -x -d 'Hold the lock at most this long'
complete -c rlock -n __rlock_in_child -x -a '(__rlock_complete_child)'

# Tokens: acquire writes the token file, release and extend read it.
complete -c rlock -n '__rlock_using acquire' -l token-file -r -F -d 'Write the token to this file'
complete -c rlock -n '__rlock_using release extend' -l token-file -r -F -d 'Read the token from this file'
complete -c rlock -n '__rlock_using release extend' -l token-env -x -a '(set -nx)' -d 'Read the token from this variable'

# release, extend.
complete -c rlock -n '__rlock_using release' -l force -d 'Remove the lock without its token'
complete -c rlock -n '__rlock_using extend' -s t -l ttl -x -d 'New TTL (duration)'

# JSON output.
complete -c rlock -n '__rlock_using acquire status list' -l json -d 'Print JSON'
