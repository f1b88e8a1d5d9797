# fish completion for rlock(1), a distributed lock for shell scripts kept in Redis.
# Install as /usr/share/fish/vendor_completions.d/rlock.fish.

# The rlock on the line (./build/rlock, say), unless the line starts with another name: the one
# asked for its options and its locks.
function __rlock_bin
    set -l tokens (commandline -opc)
    set -l bin rlock
    string match -q -- 'rlock*' (string replace -r -- '.*/' '' $tokens[1])
    and set bin (__rlock_expand_home $tokens[1])
    echo $bin
end

# The option table of that rlock, from `rlock --dump-options`: one line per option and command,
# tab-separated: command (or "global"), names (comma-separated), kind (flag or value), type (D,
# N, F, URL, SIG...), env, config key, help; see src/commands/options.hpp. Asked once per session and
# binary, and only when the line has an option: kept in __rlock_table.
function __rlock_load_options
    set -l bin (__rlock_bin)
    set -q __rlock_table_bin; and test "$__rlock_table_bin" = "$bin"; and return 0
    set -g __rlock_table_bin $bin
    set -l cmd $bin --dump-options
    command -q timeout; and set cmd timeout 1 $cmd
    set -g __rlock_table (string match -r -- '^[a-z]+\t-[^\t]*\t(?:flag|value)\t.*$' ($cmd </dev/null 2>/dev/null))
end

# Prints four lines about option $argv[1] of subcommand $argv[2] (nothing or "global" for the
# top level) from the table: its kind, its type, its long name without "--", its help; fails when
# neither the subcommand nor the global options have it.
function __rlock_option
    __rlock_load_options
    set -l sub global
    test -n "$argv[2]"; and set sub $argv[2]
    for line in $__rlock_table
        set -l f (string split \t -- $line)
        contains -- $f[1] global $sub; or continue
        set -l names (string split , -- $f[2])
        contains -- $argv[1] $names; or continue
        set -l long (string match -- '--*' $names)[1]
        printf '%s\n' $f[3] $f[4] (string replace -- -- '' $long) $f[7]
        return 0
    end
    return 1
end

# Succeeds if option word $argv[1] takes the next word as its value: a long
# option written without "=", or a cluster of short options ending in one that
# takes a value ("-qu URL"). $argv[2]: the subcommand so far (log's -n takes a
# value).
function __rlock_takes_value
    set -l word $argv[1]
    set -l o
    string match -q -- '--*=*' $word; and return 1
    if string match -q -- '--*' $word
        set o (__rlock_option $word $argv[2]); or return 1
        test "$o[1]" = value
        return
    end
    string match -q -- '-?*' $word; or return 1
    # Flags, then perhaps one short option that takes a value, attached or next.
    set -l n (string length -- $word)
    for i in (seq 2 $n)
        if set o (__rlock_option -(string sub -s $i -l 1 -- $word) $argv[2]); and test "$o[1]" = value
            test $i -eq $n
            return
        end
    end
    return 1
end

# Prints four lines about the words before the cursor: the subcommand (or
# nothing; "--" when the line has "--" before any subcommand, after which
# nothing can follow), whether the subcommand's first argument (KEY) was given
# (1 or 0), the index of the word where run's child command starts (0 when
# it has not started): after "--", or at the first word after KEY that is
# neither an option nor an option's value, and the option whose value the
# cursor is on ("-" for none). Global options may come before the
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
    set -l valopt -
    for i in (seq 2 (count $tokens))
        set -l t $tokens[$i]
        if test $skip = 1
            set skip 0
            continue
        end
        if test "$t" = --
            if test -z "$sub"
                printf '%s\n' -- 0 0 -
                return 0
            end
            if test "$sub" = run
                printf '%s\n' $sub $key (math $i + 1) -
                return 0
            end
        end
        if string match -q -- '-?*' $t
            __rlock_takes_value $t $sub; and set skip 1; and set valopt $t
            continue
        end
        if test -z "$sub"
            set sub $t
        else if test $key = 0
            set key 1
        else if test "$sub" = run
            printf '%s\n' $sub $key $i -
            return 0
        end
    end
    test $skip = 1; or set valopt -
    printf '%s\n' "$sub" $key 0 $valopt
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
    and not __rlock_takes_value $tokens[-1] run
    and echo (math (count $tokens) + 1)
end

# True when the cursor is in the child command of run.
function __rlock_in_child
    __rlock_child_start >/dev/null
end

# True where a lock name may go: any argument of status, log, check and metrics, the KEY of
# run, release and extend.
function __rlock_wants_key
    set -l parsed (__rlock_parse)
    switch "$parsed[1]"
        case status log check metrics
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
    set -l sub
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
        string match -q -- '-?*' $t; and __rlock_takes_value $t $sub; and set skip 1
        string match -q -- '-*' $t; or test -n "$sub"; or set sub $t
    end
    set -l cmd (__rlock_bin) $srv list --json --connect-timeout 300ms --io-timeout 300ms
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

# Prints the option whose value the cursor is on ("--signal"; "-u" for "-qu"), then the text
# before the value in the word ("--url=" for "--url=redis...", else nothing); fails when the
# cursor is on no option's value.
function __rlock_value_option
    __rlock_in_child; and return 1
    set -l parsed (__rlock_parse)
    if test "$parsed[4]" != -
        printf '%s\n' $parsed[4] ''
        return 0
    end
    set -l m (string match -r -- '^(--[^=]+)=' (commandline -ct)); or return 1
    printf '%s\n' $m[2] $m[1]
end

# The values for the option the cursor is on: by its long name where the table's type says
# too little, else by its type.
function __rlock_values
    set -l v (__rlock_value_option); or return
    set -l name $v[1]
    string match -q -- '--*' $name; or set name -(string sub -s -1 -- $name)
    set -l o (__rlock_option $name (__rlock_subcommand)); or return
    set -l pre $v[2]
    set -l cur (string sub -s (math (string length -- "$pre") + 1) -- (commandline -ct))
    set -l signals TERM INT HUP QUIT USR1 USR2 KILL ALRM
    set -l out
    switch "$o[3]:$o[2]"
        case 'keeper-log:*'
            set out syslog: (__fish_complete_path "$cur")
        case 'token-env:*'
            set out (set -nx)
        case 'limit:*'
            set out 2 3 4 5 8 10
        case 'once-per:*'
            set out 1m 5m 10m 15m 30m 1h 1d
        case 'log-length:*'
            set out 0 100 1000 10000
        case 'lines:*'
            set out 10 20 50 100
        case '*:F'
            set out (__fish_complete_path "$cur")
        case '*:SIG'
            set out $signals SIG$signals
        case '*:WHAT'
            set out wait\t'Keep the lock until they exit' kill\t'End them'
        case '*:PID'
            set out (__fish_complete_pids)
        case '*:URL'
            set out redis:// rediss:// unix:// redis+sentinel://
        case '*:D'
            set out 500ms 1s 5s 30s 1m 5m 30m 1h
    end
    for x in $out
        printf '%s%s\n' "$pre" $x
    end
end

# True where an option may go: the word under the cursor starts with "-", and is no option's
# value nor in run's command.
function __rlock_wants_option
    string match -q -- '-*' (commandline -ct); or return 1
    __rlock_in_child; and return 1
    __rlock_value_option >/dev/null; and return 1
    set -l parsed (__rlock_parse)
    test "$parsed[1]" != --
end

# The options of the subcommand on the line (the global ones before it), with their help, from
# the table.
function __rlock_option_names
    __rlock_load_options
    set -l sub (__rlock_subcommand); or set sub global
    for line in $__rlock_table
        set -l f (string split \t -- $line)
        contains -- $f[1] global $sub; or continue
        for n in (string split , -- $f[2])
            printf '%s\t%s\n' $n $f[7]
        end
    end
end

complete -c rlock -f

# Lock names, where a lock name may go.
complete -c rlock -n '__rlock_wants_key; and not __rlock_in_child; and not __rlock_value_option >/dev/null' -x -a '(__rlock_locks)' -d 'Held lock'

# Subcommands.
set -l __rlock_sub '__rlock_needs_subcommand; and not __rlock_value_option >/dev/null'
complete -c rlock -n $__rlock_sub -a run -d 'Run a command while holding a lock'
complete -c rlock -n $__rlock_sub -a acquire -d 'Take a lock and keep it after rlock exits'
complete -c rlock -n $__rlock_sub -a release -d 'Give a lock back (token required)'
complete -c rlock -n $__rlock_sub -a extend -d 'Reset the TTL of a lock (token required)'
complete -c rlock -n $__rlock_sub -a status -d 'Show who holds locks'
complete -c rlock -n $__rlock_sub -a list -d 'List the locks under the prefix'
complete -c rlock -n $__rlock_sub -a log -d 'Show the history of locks: who held, waited for, skipped or lost them'
complete -c rlock -n $__rlock_sub -a check -d 'A monitoring check of locks (Nagios plugin convention)'
complete -c rlock -n $__rlock_sub -a metrics -d 'The locks as Prometheus metrics'

# Options, and their values: from the binary's table (rlock --dump-options).
complete -c rlock -n __rlock_wants_option -a '(__rlock_option_names)'
complete -c rlock -n '__rlock_value_option >/dev/null' -x -a '(__rlock_values)'

# run's command.
complete -c rlock -n __rlock_in_child -x -a '(__rlock_complete_child)'
