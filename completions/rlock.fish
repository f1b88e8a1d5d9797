# fish completion for rlock(1), a distributed lock for shell scripts kept in Redis.
# Install as /usr/share/fish/vendor_completions.d/rlock.fish.

# Succeeds if option word $argv[1] takes the next word as its value: a long
# option written without "=", or a cluster of short options ending in one that
# takes a value ("-qu URL").
function __rlock_takes_value
    contains -- $argv[1] --url --node-timeout --connect-timeout --io-timeout --timeout --prefix \
        --password-file --cacert --cert --key --sentinel-user --sentinel-password-file \
        --config --ttl --wait --conflict-exit-code --wait-replicas --wait-timeout \
        --limit --command --signal --kill-after --lost-exit-code --max-hold --leftovers \
        --token-file --token-env --pid --keeper-log --min-hold --log-length --lines
    or string match -qr -- '^-[hVqvnsx]*[utwEc]$' $argv[1]
end

# Prints three lines about the words before the cursor: the subcommand (or
# nothing; "--" when the line has "--" before any subcommand, after which
# nothing can follow), whether the subcommand's first argument (KEY) was given
# (1 or 0), and the index of the word where run's child command starts (0 when
# it has not started): after "--", or at the first word after KEY that is
# neither an option nor an option's value. Global options may come before the
# subcommand. The conditions of the completions below ask it many times for one
# line: the answer for the last line is kept.
function __rlock_parse
    set -l line (commandline -pc)
    if not set -q __rlock_parsed_line; or test "$__rlock_parsed_line" != "$line"
        set -g __rlock_parsed (__rlock_parse_tokens (commandline -opc))
        set -g __rlock_parsed_line $line
    end
    printf '%s\n' $__rlock_parsed
end

function __rlock_parse_tokens
    set -l tokens $argv
    set -l sub
    set -l key 0
    set -l skip 0
    for i in (seq 2 (count $tokens))
        set -l t $tokens[$i]
        if test $skip = 1
            set skip 0
            continue
        end
        if test "$t" = --
            if test -z "$sub"
                printf '%s\n' -- 0 0
                return 0
            end
            if test "$sub" = run
                printf '%s\n' $sub $key (math $i + 1)
                return 0
            end
        end
        if string match -q -- '-?*' $t
            __rlock_takes_value $t; and set skip 1
            # log's -n takes the number of events.
            test "$sub" = log; and string match -qr -- '^-[hVqvf]*n$' $t; and set skip 1
            continue
        end
        if test -z "$sub"
            set sub $t
        else if test $key = 0
            set key 1
        else if test "$sub" = run
            printf '%s\n' $sub $key $i
            return 0
        end
    end
    printf '%s\n' "$sub" $key 0
end

# The subcommand on the command line, or nothing.
function __rlock_subcommand
    set -l parsed (__rlock_parse)
    test -n "$parsed[1]"
    and echo $parsed[1]
end

# True when no subcommand has been given yet.
function __rlock_needs_subcommand
    not __rlock_subcommand >/dev/null
end

# True when the subcommand is one of the arguments, and (for run) the
# cursor is not in the child command.
function __rlock_using
    set -l sub (__rlock_subcommand)
    or return 1
    contains -- $sub $argv
    or return 1
    not __rlock_in_child
end

# The index of the word where run's child command starts, when the cursor is
# in it (the command word itself included); fails otherwise.
function __rlock_child_start
    set -l parsed (__rlock_parse)
    test "$parsed[1]" = run
    or return 1
    if test $parsed[3] -gt 0
        echo $parsed[3]
        return 0
    end
    # KEY given, and the word under the cursor is neither an option nor the
    # value of the option before it: it is the command word.
    set -l tokens (commandline -opc)
    test $parsed[2] = 1
    and not string match -q -- '-*' (commandline -ct)
    and not __rlock_takes_value $tokens[-1]
    and echo (math (count $tokens) + 1)
end

# True when the cursor is in the child command of run.
function __rlock_in_child
    __rlock_child_start >/dev/null
end

# True where a lock name may go: any argument of status and log, the KEY of
# run, release and extend.
function __rlock_wants_key
    set -l parsed (__rlock_parse)
    switch "$parsed[1]"
        case status log
            return 0
        case run release extend
            test $parsed[2] = 0
            return
    end
    return 1
end

# The value of an option as given: a leading ~/ made $HOME/.
function __rlock_expand_home
    string replace -r -- '^~/' "$HOME/" $argv[1]
end

# The lock names held now on the server that the words on the line select
# (-u, --prefix, TLS, --config, sentinel options, before or after the command
# name), from `rlock list`: quick and silent, with short timeouts, errors to
# /dev/null and `timeout 1` around it when there is one.
function __rlock_locks
    set -l tokens (commandline -opc)
    set -l srv
    set -l skip 0
    for i in (seq 2 (count $tokens))
        set -l t $tokens[$i]
        if test $skip = 1
            set skip 0
            continue
        end
        test "$t" = --; and break
        switch $t
            case --url=\* --prefix=\* --password-file=\* --cacert=\* --cert=\* --key=\* --config=\* \
                --sentinel-user=\* --sentinel-password-file=\*
                set -a srv (string split -m1 = -- $t)[1]=(__rlock_expand_home (string split -m1 = -- $t)[2])
            case --url --prefix --password-file --cacert --cert --key --config --sentinel-user \
                --sentinel-password-file
                set -q tokens[(math $i + 1)]
                and set -a srv $t=(__rlock_expand_home $tokens[(math $i + 1)])
            case --insecure
                set -a srv --insecure
            case '-*'
                if string match -qr -- '^-[hVqvnsx]*u$' $t
                    set -q tokens[(math $i + 1)]
                    and set -a srv --url=(__rlock_expand_home $tokens[(math $i + 1)])
                else if string match -qr -- '^-[hVqvnsx]*u.' $t
                    set -a srv --url=(__rlock_expand_home (string replace -r -- '^-[hVqvnsx]*u' '' $t))
                end
        end
        string match -q -- '-?*' $t; and __rlock_takes_value $t; and set skip 1
    end
    # The rlock on the line (./build/rlock, say), unless the line starts with another name.
    set -l bin rlock
    string match -q -- 'rlock*' (string replace -r -- '.*/' '' $tokens[1])
    and set bin (__rlock_expand_home $tokens[1])
    set -l cmd $bin $srv list --json --connect-timeout 300ms --io-timeout 300ms
    command -q timeout; and set cmd timeout 1 $cmd
    # Each lock's object starts with its "key"; a name holds no control
    # character, so only \" and \\ are escaped.
    $cmd </dev/null 2>/dev/null |
        grep -oE '\\{"key":"([^"\\\\]|\\\\.)*"' | sed -e 's/^{"key":"//' -e 's/"$//' -e 's/\\\\\\(.\\)/\\1/g'
end

# Completions for the child command line.
function __rlock_complete_child
    set -l tokens (commandline -opc)
    set -l start (__rlock_child_start)
    or return
    set -l child
    if test $start -le (count $tokens)
        set child (string escape -- $tokens[$start..-1])
    end
    complete -C (string trim -l -- "$child "(commandline -ct))
end

complete -c rlock -f

# Lock names, where a lock name may go.
complete -c rlock -n '__rlock_wants_key; and not __rlock_in_child' -x -a '(__rlock_locks)' -d 'Held lock'

# Subcommands.
complete -c rlock -n __rlock_needs_subcommand -a run -d 'Run a command while holding a lock'
complete -c rlock -n __rlock_needs_subcommand -a acquire -d 'Take a lock and keep it after rlock exits'
complete -c rlock -n __rlock_needs_subcommand -a release -d 'Give a lock back (token required)'
complete -c rlock -n __rlock_needs_subcommand -a extend -d 'Reset the TTL of a lock (token required)'
complete -c rlock -n __rlock_needs_subcommand -a status -d 'Show who holds locks'
complete -c rlock -n __rlock_needs_subcommand -a list -d 'List the locks under the prefix'
complete -c rlock -n __rlock_needs_subcommand -a log -d 'Show the history of locks: who held, waited for, skipped or lost them'

# Global options: before the subcommand, or after it with its own options.
set -l __rlock_global '__rlock_needs_subcommand; or __rlock_using run acquire release extend status list log'
complete -c rlock -n $__rlock_global -s h -l help -d 'Print help and exit'
complete -c rlock -n $__rlock_global -s V -l version -d 'Print version and exit'
complete -c rlock -n $__rlock_global -s u -l url -x -a 'redis:// rediss:// unix:// redis+sentinel://' -d 'Redis URL (once per master for a Redlock quorum)'
complete -c rlock -n $__rlock_global -l node-timeout -x -d 'With several URLs: the timeout of each master (duration)'
complete -c rlock -n $__rlock_global -l connect-timeout -x -d 'Connect timeout, name lookup included (duration)'
complete -c rlock -n $__rlock_global -l io-timeout -x -d 'Timeout of each Redis command (duration)'
complete -c rlock -n $__rlock_global -l prefix -x -d 'Key namespace'
complete -c rlock -n $__rlock_global -l password-file -r -F -d 'Read the Redis password from this file (first line)'
complete -c rlock -n $__rlock_global -l cacert -r -F -d 'CA certificates for rediss://'
complete -c rlock -n $__rlock_global -l cert -r -F -d 'Client certificate for rediss://'
complete -c rlock -n $__rlock_global -l key -r -F -d 'Client certificate key for rediss:// (env RLOCK_TLS_KEY)'
complete -c rlock -n $__rlock_global -l insecure -d 'Do not verify the server certificate'
complete -c rlock -n $__rlock_global -l sentinel-user -x -d 'ACL user for the sentinels'
complete -c rlock -n $__rlock_global -l sentinel-password-file -r -F -d 'Read the sentinel password from this file (first line)'
complete -c rlock -n $__rlock_global -l config -r -F -d 'TOML configuration file'
complete -c rlock -n $__rlock_global -l syslog -d 'Log acquired, busy, lost and released to syslog'
complete -c rlock -n $__rlock_global -l log-length -x -a '0 100 1000 10000' -d 'Events of history kept per lock in Redis (0: none)'
complete -c rlock -n $__rlock_global -s q -l quiet -d 'Print nothing but errors'
complete -c rlock -n $__rlock_global -s v -l verbose -d 'Print a timestamped timeline on stderr'

# Taking a lock: run, acquire.
complete -c rlock -n '__rlock_using run acquire' -s t -l ttl -x -d 'Lease length (duration)'
complete -c rlock -n '__rlock_using run acquire' -s w -l wait -x -d 'Wait in the queue at most this long (duration)'
complete -c rlock -n '__rlock_using run acquire' -l timeout -x -d 'Wait at most this long (as --wait)'
complete -c rlock -n '__rlock_using run acquire' -s n -l no-wait -d 'Fail at once if the lock cannot be taken now (never queue)'
complete -c rlock -n '__rlock_using run acquire' -l nb -d 'Fail at once if the lock is held (as -n)'
complete -c rlock -n '__rlock_using run acquire' -l nonblock -d 'Fail at once if the lock is held (as -n)'
complete -c rlock -n '__rlock_using run acquire' -s E -l conflict-exit-code -x -d 'Exit code when busy or the wait timed out'
complete -c rlock -n '__rlock_using run acquire' -l wait-replicas -x -d 'After acquiring, wait for N replicas to acknowledge'
complete -c rlock -n '__rlock_using run acquire' -l wait-timeout -x -d 'How long --wait-replicas waits (duration)'
complete -c rlock -n '__rlock_using run acquire' -l strict -d 'Refuse a server whose maxmemory-policy can evict locks'
complete -c rlock -n '__rlock_using run acquire' -l limit -x -a '2 3 4 5 8 10' -d 'A semaphore: up to N holders at once (all must agree on N)'
complete -c rlock -n '__rlock_using run acquire' -s s -l shared -d 'A shared hold: many shared holders, or one exclusive'
complete -c rlock -n '__rlock_using run acquire' -s x -l exclusive -d 'An exclusive hold (the default)'
complete -c rlock -n '__rlock_using run acquire' -l min-hold -x -d 'Keep the lock until this long after it was taken (duration)'
complete -c rlock -n '__rlock_using run acquire' -l supersede -d 'Newest wins: replace older waiters that also gave --supersede'
complete -c rlock -n '__rlock_using run acquire' -l preempt -d 'Stop a --preemptible holder and be served next'

# run only.
complete -c rlock -n '__rlock_using run' -s c -l command -x -d 'Run this string with /bin/sh -c'
complete -c rlock -n '__rlock_using run' -l signal -x -a 'TERM INT HUP QUIT USR1 USR2 KILL ALRM SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2 SIGKILL SIGALRM' -d 'Signal sent to the command tree when the lock is lost'
complete -c rlock -n '__rlock_using run' -l kill-after -x -d 'Send SIGKILL this long after the signal'
complete -c rlock -n '__rlock_using run' -l lost-exit-code -x -d 'Exit code when the lock was lost'
complete -c rlock -n '__rlock_using run' -l max-hold -x -d 'Hold the lock at most this long'
complete -c rlock -n '__rlock_using run' -l leftovers -x -a 'wait\t"Keep the lock until they exit" kill\t"End them"' -d 'What to do with processes the command leaves running'
complete -c rlock -n '__rlock_using run' -l preemptible -d 'A --preempt request may stop the command; rlock then exits 75'
complete -c rlock -n __rlock_in_child -x -a '(__rlock_complete_child)'

# acquire --keepalive.
complete -c rlock -n '__rlock_using acquire' -l keepalive -d 'A keeper renews the lock while the calling process lives, then releases it'
complete -c rlock -n '__rlock_using acquire' -l pid -x -a '(__fish_complete_pids)' -d 'With --keepalive: the process whose life the hold follows'
complete -c rlock -n '__rlock_using acquire' -l signal -x -a 'TERM INT HUP QUIT USR1 USR2 KILL ALRM SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2 SIGKILL SIGALRM' -d 'With --keepalive: signal sent to that process if the lock is lost'
complete -c rlock -n '__rlock_using acquire' -l max-hold -x -d 'With --keepalive: give the lock up after this long'
complete -c rlock -n '__rlock_using acquire' -l keeper-log -r -F -a 'syslog:' -d 'With --keepalive: the keeper logs to this file, or to syslog with syslog:'

# Tokens: acquire writes the token file, release and extend read it.
complete -c rlock -n '__rlock_using acquire' -l token-file -r -F -d 'Write the token to this file'
complete -c rlock -n '__rlock_using release extend' -l token-file -r -F -d 'Read the token from this file'
complete -c rlock -n '__rlock_using release extend' -l token-env -x -a '(set -nx)' -d 'Read the token from this variable'

# release, extend.
complete -c rlock -n '__rlock_using release' -l force -d 'Remove the lock without its token'
complete -c rlock -n '__rlock_using extend' -s t -l ttl -x -d 'New TTL (default: the TTL the lock was last given)'

# JSON output.
complete -c rlock -n '__rlock_using acquire status list log' -l json -d 'Print JSON'

# log.
complete -c rlock -n '__rlock_using log' -s n -l lines -x -a '10 20 50 100' -d 'The last N events'
complete -c rlock -n '__rlock_using log' -s f -l follow -d 'Print new events as they come, until interrupted'
