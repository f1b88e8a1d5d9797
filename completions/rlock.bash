# bash completion for rlock(1), a distributed lock for shell scripts kept in Redis.
# Install as /usr/share/bash-completion/completions/rlock, or source this file.
# Works with or without the bash-completion package.

_rlock_signals='TERM INT HUP QUIT USR1 USR2 KILL ALRM'

# COMPREPLY from compgen ARGS, one candidate a line (file names may hold spaces).
_rlock_reply()
{
    mapfile -t COMPREPLY < <(compgen "$@")
}

# Print the options of one rlock subcommand ("" for the top level).
_rlock_options()
{
    # The global options, accepted before or after the command name.
    local -a common=(-h --help -V --version -u --url --node-timeout --connect-timeout
        --io-timeout --prefix --password-file --cacert --cert --key --insecure
        --sentinel-user --sentinel-password-file --config --syslog -q --quiet -v --verbose)
    local -a taking=(-t --ttl -w --wait --timeout -n --no-wait --nb --nonblock
        -E --conflict-exit-code --wait-replicas --wait-timeout --strict --limit
        -s --shared -x --exclusive)
    case $1 in
        run)
            printf '%s\n' "${common[@]}" "${taking[@]}" -c --command --signal --kill-after \
                --lost-exit-code --max-hold --leftovers
            ;;
        acquire)
            printf '%s\n' "${common[@]}" "${taking[@]}" --token-file --json --keepalive --pid \
                --signal --max-hold --keeper-log
            ;;
        release)
            printf '%s\n' "${common[@]}" --token-file --token-env --force
            ;;
        extend)
            printf '%s\n' "${common[@]}" -t --ttl --token-file --token-env
            ;;
        status | list)
            printf '%s\n' "${common[@]}" --json
            ;;
        *)
            printf '%s\n' "${common[@]}"
            ;;
    esac
}

# Succeeds if option $1 takes a value (in the next word or after "=").
_rlock_takes_value()
{
    case $1 in
        -u | --url | --node-timeout | --connect-timeout | --io-timeout | --timeout | --prefix | \
        --config | \
        --password-file | --cacert | --cert | --key | \
        --sentinel-user | --sentinel-password-file | \
        -t | --ttl | -w | --wait | -E | --conflict-exit-code | \
        --wait-replicas | --wait-timeout | --limit | \
        -c | --command | --signal | --kill-after | --lost-exit-code | \
        --max-hold | --leftovers | --token-file | --token-env | --pid | --keeper-log)
            return 0
            ;;
    esac
    return 1
}

_rlock()
{
    local cur prev cword
    local -a words
    COMPREPLY=()
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
    cur=${words[cword]}
    prev=
    ((cword > 0)) && prev=${words[cword - 1]}

    # "--opt=value": with "=" in COMP_WORDBREAKS (the default) bash splits it
    # into "--opt" "=" "value"; otherwise it stays one word.
    local eqprefix=
    if [[ $cur == = ]]; then
        cur=
    elif [[ $prev == = ]] && ((cword >= 2)); then
        prev=${words[cword - 2]}
    elif [[ $cur == --*=* ]]; then
        prev=${cur%%=*}
        cur=${cur#*=}
        [[ $COMP_WORDBREAKS == *=* ]] || eqprefix=$prev=
    fi

    # Find the subcommand (global options may come before it) and, for run,
    # where the child command starts: after "--", or at the first word after
    # KEY that is neither an option nor an option's value.
    local sub='' i w child=0 key_seen=0 skip=0
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        if ((skip)); then
            skip=0
            continue
        fi
        [[ $w == = ]] && { skip=1; continue; }
        if [[ $sub == run && $w == -- ]]; then
            child=$((i + 1))
            break
        fi
        if [[ $w == -?* ]]; then
            if _rlock_takes_value "$w" && [[ ${words[i + 1]} != = ]]; then
                skip=1
            fi
            continue
        fi
        if [[ -z $sub ]]; then
            sub=$w
        elif [[ $sub == run ]] && ((!key_seen)); then
            key_seen=1
        elif [[ $sub == run ]]; then
            child=$i
            break
        fi
    done

    # The command word of run (no "--" needed), or anything after it: complete
    # the child command line.
    if ((!child)) && [[ $sub == run ]] && ((key_seen)) && [[ $cur != -* ]] &&
        ! _rlock_takes_value "$prev"; then
        child=$cword
    fi
    if ((child)); then
        if declare -F _command_offset >/dev/null 2>&1; then
            _command_offset "$child"
        elif ((cword == child)); then
            _rlock_reply -c -- "$cur"
        else
            compopt -o filenames 2>/dev/null
            _rlock_reply -f -- "$cur"
        fi
        return 0
    fi

    # The value of an option.
    if _rlock_takes_value "$prev"; then
        case $prev in
            --config | --token-file | --password-file | --cacert | --cert | --key | \
            --sentinel-password-file)
                compopt -o filenames 2>/dev/null
                _rlock_reply -f -- "$cur"
                ;;
            --signal)
                if [[ $cur == [Ss]* ]]; then
                    _rlock_reply -W "SIG${_rlock_signals// / SIG}" -- "$cur"
                else
                    _rlock_reply -W "$_rlock_signals" -- "$cur"
                fi
                ;;
            --leftovers)
                _rlock_reply -W 'wait kill' -- "$cur"
                ;;
            --token-env)
                _rlock_reply -e -- "$cur"
                ;;
            --keeper-log)
                # A file to append to, or syslog: for syslog.
                compopt -o filenames 2>/dev/null
                _rlock_reply -f -- "$cur"
                [[ syslog: == "$cur"* ]] && COMPREPLY+=(syslog:)
                ;;
            --pid)
                # The process whose life a keepalive hold follows.
                if declare -F _pids >/dev/null 2>&1; then
                    _pids
                else
                    _rlock_reply -W "$(cd /proc 2>/dev/null && printf '%s ' [0-9]*)" -- "$cur"
                fi
                ;;
            -u | --url)
                _rlock_reply -W 'redis:// rediss:// unix:// redis+sentinel://' -- "$cur"
                if declare -F __ltrim_colon_completions >/dev/null 2>&1; then
                    __ltrim_colon_completions "$cur"
                fi
                compopt -o nospace 2>/dev/null
                ;;
            -t | --ttl | -w | --wait | --node-timeout | --connect-timeout | --io-timeout | \
            --timeout | --kill-after | --max-hold | --wait-timeout)
                _rlock_reply -W '500ms 1s 5s 30s 1m 5m 30m 1h' -- "$cur"
                ;;
            --limit)
                # A number of holders, 1 or more.
                _rlock_reply -W '2 3 4 5 8 10' -- "$cur"
                ;;
            *)
                # --prefix, --command, --sentinel-user, exit codes,
                # --wait-replicas: free text.
                ;;
        esac
        if [[ -n $eqprefix ]]; then
            COMPREPLY=("${COMPREPLY[@]/#/$eqprefix}")
        fi
        return 0
    fi

    if [[ -z $sub ]]; then
        if [[ $cur == -* ]]; then
            _rlock_reply -W "$(_rlock_options '')" -- "$cur"
        else
            _rlock_reply -W 'run acquire release extend status list' -- "$cur"
        fi
        return 0
    fi

    if [[ $cur == -* ]]; then
        local opts
        opts=$(_rlock_options "$sub")
        [[ $sub == run ]] && ((key_seen)) && opts+=$'\n--'
        _rlock_reply -W "$opts" -- "$cur"
    fi
    # KEY and PATTERN are free text.
    return 0
}

complete -F _rlock rlock
