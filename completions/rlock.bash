# bash completion for rlock(1), a distributed lock for shell scripts kept in Redis.
# Install as /usr/share/bash-completion/completions/rlock, or source this file.
# Works with or without the bash-completion package.

_rlock_signals='TERM INT HUP QUIT USR1 USR2 KILL ALRM'

# COMPREPLY from compgen ARGS, one candidate a line (file names may hold spaces).
_rlock_reply()
{
    mapfile -t COMPREPLY < <(compgen "$@")
}

# The option table of the rlock on the line, from `rlock --dump-options`: one line per option
# and command, tab-separated: command (or "global"), names (comma-separated), kind (flag or
# value), type (D, N, F, URL, SIG...), env, config key, help; see src/commands/options.hpp. Asked
# once per session and binary ($1), and only when the line has an option: kept in
# _rlock_option_kind["COMMAND NAME"] (flag or value), _rlock_option_type and _rlock_option_long
# (the long name of each name), _rlock_option_names["COMMAND"] (every name, one a line).
_rlock_load_options()
{
    local bin=${1:-rlock}
    [[ ${_rlock_options_bin-} == "$bin" ]] && return 0
    _rlock_options_bin=$bin
    declare -gA _rlock_option_kind=() _rlock_option_type=() _rlock_option_long=() _rlock_option_names=()
    local -a cmd=("$bin" --dump-options)
    if type -P timeout >/dev/null 2>&1; then
        cmd=(timeout 1 "${cmd[@]}")
    fi
    local sub names kind type rest name long
    local -a all
    while IFS=$'\t' read -r sub names kind type rest; do
        [[ $sub == [a-z]* && $names == -* && ($kind == flag || $kind == value) ]] || continue
        IFS=, read -ra all <<<"$names"
        long=${all[${#all[@]} - 1]}
        for name in "${all[@]}"; do
            [[ $name == --* && $long != --* ]] && long=$name
        done
        for name in "${all[@]}"; do
            _rlock_option_kind["$sub $name"]=$kind
            _rlock_option_type["$sub $name"]=$type
            _rlock_option_long["$sub $name"]=${long#--}
            _rlock_option_names[$sub]+=$name$'\n'
        done
    done < <("${cmd[@]}" </dev/null 2>/dev/null)
}

# Print the options of one rlock subcommand ("" for the top level): its own, then the global
# ones.
_rlock_options()
{
    _rlock_load_options "$_rlock_bin"
    [[ -n $1 ]] && printf '%s' "${_rlock_option_names[$1]-}"
    printf '%s' "${_rlock_option_names[global]-}"
}

# Sets _rlock_found to "COMMAND NAME", the key of option NAME ($1) of subcommand $2 in the
# table, or fails when neither the subcommand nor the global options have it.
_rlock_find_option()
{
    _rlock_load_options "$_rlock_bin"
    _rlock_found="${2:-global} $1"
    [[ -v _rlock_option_kind[$_rlock_found] ]] && return 0
    _rlock_found="global $1"
    [[ -v _rlock_option_kind[$_rlock_found] ]]
}

# Succeeds if option word $1 takes the next word as its value: a long option
# written without "=", or a cluster of short options ending in one that takes
# a value ("-qu URL"). $2: the subcommand so far (log's -n takes a value).
_rlock_takes_value()
{
    case $1 in
        --*=*)
            return 1
            ;;
        --*)
            _rlock_find_option "$1" "${2-}" && [[ ${_rlock_option_kind[$_rlock_found]} == value ]]
            return
            ;;
        -?*)
            # Flags, then perhaps one short option that takes a value, attached or next.
            local i
            for ((i = 1; i < ${#1}; i++)); do
                if _rlock_find_option "-${1:i:1}" "${2-}" && [[ ${_rlock_option_kind[$_rlock_found]} == value ]]; then
                    ((i == ${#1} - 1))
                    return
                fi
            done
            ;;
    esac
    return 1
}

# The value of an option as the shell would see it: surrounding quotes and
# backslashes removed, a leading "~/" made $HOME/.
_rlock_dequote()
{
    local v=$1
    case $v in
        \'*\') v=${v:1:${#v}-2} ;;
        \"*\") v=${v:1:${#v}-2} ;;
        *) v=${v//\\/} ;;
    esac
    # shellcheck disable=SC2088 # a literal "~/", made $HOME/
    [[ $v == '~/'* ]] && v=$HOME/${v#'~/'}
    printf '%s' "$v"
}

# The server-selecting options in option word $1 (with $2, the next word, as
# its value when the option takes one): appends them to the array _rlock_srv,
# for `rlock list`.
_rlock_server_option()
{
    local w=$1 v=$2 name
    if [[ $w == --*=* ]]; then
        name=${w%%=*}
        v=${w#*=}
    elif [[ $w == --* ]]; then
        name=$w
    elif [[ $w =~ ^-[hVqvnsx]*u$ ]]; then
        # "-u URL", or a cluster of flags ending in u: the URL is the next word.
        name=--url
    elif [[ $w =~ ^-[hVqvnsx]*u(.+)$ ]]; then
        # The URL attached: "-uredis://...", "-qu...".
        name=--url
        v=${BASH_REMATCH[1]}
    else
        return
    fi
    case $name in
        --insecure)
            [[ $w == --insecure ]] && _rlock_srv+=(--insecure)
            ;;
        --url | --prefix | --password-file | --cacert | --cert | --key | --config | \
        --sentinel-user | --sentinel-password-file)
            # "--name=value": a value starting with "-" stays a value.
            _rlock_srv+=("$name=$(_rlock_dequote "$v")")
            ;;
    esac
}

# Print the names of the held locks, one a line, from `rlock list --json` on
# the server the options in _rlock_srv select (each lock's object starts with
# its "key"; a name holds no control character, so only \" and \\ are
# escaped). Quick and silent: short timeouts, errors to /dev/null, and
# `timeout 1` around it when there is one.
_rlock_lock_names()
{
    # The rlock on the line (./build/rlock, say), unless the line starts with another name.
    local bin=${1:-rlock}
    [[ ${bin##*/} == rlock* ]] || bin=rlock
    # shellcheck disable=SC2088 # a literal "~/", made $HOME/
    [[ $bin == '~/'* ]] && bin=$HOME/${bin#'~/'}
    local -a cmd=("$bin" "${_rlock_srv[@]}" list --json --connect-timeout 300ms --io-timeout 300ms)
    if type -P timeout >/dev/null 2>&1; then
        cmd=(timeout 1 "${cmd[@]}")
    fi
    "${cmd[@]}" </dev/null 2>/dev/null |
        grep -oE '\{"key":"([^"\\]|\\.)*"' | sed -e 's/^{"key":"//' -e 's/"$//' -e 's/\\\(.\)/\1/g'
}

# Sets words, cword and cur from COMP_WORDS, COMP_CWORD, COMP_LINE and
# COMP_POINT, with the words bash split at the characters of
# COMP_WORDBREAKS (":" in "redis://host:6379", "=" in "--url=...") joined
# again; _rlock_at[j] is the index in COMP_WORDS where words[j] starts.
_rlock_words()
{
    words=() _rlock_at=()
    local line=${COMP_LINE:0:COMP_POINT} rest i w ws
    for ((i = 0; i <= COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        rest=${line#"${line%%[![:space:]]*}"}
        ws=$((${#line} - ${#rest}))
        line=$rest
        if ((i == COMP_CWORD)); then
            # The current word up to the cursor.
            ((${#w} > ${#line})) && w=$line
        fi
        if [[ $line != "$w"* ]]; then
            # COMP_LINE does not match: take COMP_WORDS as they are.
            words=("${COMP_WORDS[@]:0:COMP_CWORD+1}")
            _rlock_at=()
            local j
            for ((j = 0; j <= COMP_CWORD; j++)); do
                _rlock_at+=("$j")
            done
            break
        fi
        line=${line:${#w}}
        if ((i > 0 && ws == 0)); then
            words[${#words[@]} - 1]+=$w
        else
            words+=("$w")
            _rlock_at+=("$i")
        fi
    done
    cword=$((${#words[@]} - 1))
    cur=${words[cword]}
}

_rlock()
{
    local cur cword
    local -a words _rlock_at _rlock_srv=()
    COMPREPLY=()
    _rlock_words
    # The rlock on the line (./build/rlock, say), unless the line starts with another name: the
    # one asked for its options and its locks.
    local _rlock_bin=${words[0]} _rlock_found
    [[ ${_rlock_bin##*/} == rlock* ]] || _rlock_bin=rlock
    # shellcheck disable=SC2088 # a literal "~/", made $HOME/
    [[ $_rlock_bin == '~/'* ]] && _rlock_bin=$HOME/${_rlock_bin#'~/'}

    # What readline replaces is the part of the word after its last
    # COMP_WORDBREAKS character: candidates lose what comes before it.
    local breaks='' ltrim=''
    [[ $COMP_WORDBREAKS == *=* ]] && breaks+='='
    [[ $COMP_WORDBREAKS == *:* ]] && breaks+=':'
    [[ -n $breaks && $cur == *[$breaks]* ]] && ltrim=${cur%"${cur##*["$breaks"]}"}

    # Find the subcommand (global options may come before it), the option
    # whose value the cursor is on, and, for run, where the child command
    # starts: after "--", or at the first word after KEY that is neither an
    # option nor an option's value.
    local sub='' i w child=0 key_seen=0 nargs=0 valopt='' vpre='' vcur=$cur
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        if [[ $w == -- ]]; then
            # Before the command name nothing may follow "--"; after run's
            # KEY the child command does.
            [[ $sub == run ]] && ((key_seen)) && child=$((i + 1))
            [[ $sub == run ]] || return 0
            break
        fi
        if [[ $w == -?* ]]; then
            _rlock_server_option "$w" "${words[i + 1]}"
            if _rlock_takes_value "$w" "$sub"; then
                ((i + 1 == cword)) && valopt=$w
                ((i++))
            fi
            continue
        fi
        if [[ -z $sub ]]; then
            sub=$w
        elif [[ $sub == run ]] && ((key_seen)); then
            child=$i
            break
        else
            key_seen=1
            ((nargs++))
        fi
    done
    if [[ -z $valopt && $cur == --*=* ]] && ((!child)); then
        valopt=${cur%%=*}
        vpre=$valopt=
        vcur=${cur#*=}
    fi

    # The command word of run (no "--" needed), or anything after it: complete
    # the child command line.
    if ((!child)) && [[ $sub == run ]] && ((key_seen)) && [[ -z $valopt && $cur != -* ]]; then
        child=$cword
    fi
    if ((child)); then
        if declare -F _command_offset >/dev/null 2>&1; then
            _command_offset "${_rlock_at[child]}"
        elif ((cword == child)); then
            _rlock_reply -c -- "$cur"
        else
            compopt -o filenames 2>/dev/null
            _rlock_reply -f -- "$cur"
        fi
        return 0
    fi

    if [[ -n $valopt ]]; then
        # The value of an option: by its long name where the table's type is not enough, else
        # by its type.
        local vname=$valopt vlong='' vtype=''
        [[ $vname == --* ]] || vname=-${vname: -1}
        if _rlock_find_option "$vname" "$sub"; then
            vlong=${_rlock_option_long[$_rlock_found]}
            vtype=${_rlock_option_type[$_rlock_found]}
        fi
        case $vlong:$vtype in
            keeper-log:*)
                # A file to append to, or syslog: for syslog.
                compopt -o filenames 2>/dev/null
                _rlock_reply -f -- "$vcur"
                [[ syslog: == "$vcur"* ]] && COMPREPLY+=(syslog:)
                ;;
            token-env:*)
                _rlock_reply -e -- "$vcur"
                ;;
            limit:*)
                # A number of holders, 1 or more.
                _rlock_reply -W '2 3 4 5 8 10' -- "$vcur"
                ;;
            once-per:*)
                # A schedule's period: cron's and timers' usual ones.
                _rlock_reply -W '1m 5m 10m 15m 30m 1h 1d' -- "$vcur"
                ;;
            log-length:*)
                # Events kept per lock (at least); 0 turns the history off.
                _rlock_reply -W '0 100 1000 10000' -- "$vcur"
                ;;
            lines:*)
                _rlock_reply -W '10 20 50 100' -- "$vcur"
                ;;
            *:F)
                compopt -o filenames 2>/dev/null
                _rlock_reply -f -- "$vcur"
                ;;
            *:SIG)
                if [[ $vcur == [Ss]* ]]; then
                    _rlock_reply -W "SIG${_rlock_signals// / SIG}" -- "$vcur"
                else
                    _rlock_reply -W "$_rlock_signals" -- "$vcur"
                fi
                ;;
            *:WHAT)
                _rlock_reply -W 'wait kill' -- "$vcur"
                ;;
            *:PID)
                # The process whose life a keepalive hold follows.
                _rlock_reply -W "$(cd /proc 2>/dev/null && printf '%s ' [0-9]*)" -- "$vcur"
                ;;
            *:URL)
                _rlock_reply -W 'redis:// rediss:// unix:// redis+sentinel://' -- "$vcur"
                compopt -o nospace 2>/dev/null
                ;;
            *:D)
                _rlock_reply -W '500ms 1s 5s 30s 1m 5m 30m 1h' -- "$vcur"
                ;;
            *)
                # --prefix, --command, --sentinel-user, exit codes,
                # --wait-replicas: free text.
                ;;
        esac
        if [[ -n $vpre ]]; then
            COMPREPLY=("${COMPREPLY[@]/#/$vpre}")
        fi
    elif [[ -z $sub ]]; then
        # Before the command name: global options, or the command name.
        if [[ $cur == -* ]]; then
            _rlock_reply -W "$(_rlock_options '')" -- "$cur"
        else
            _rlock_reply -W 'run acquire release extend status list log check metrics' -- "$cur"
        fi
    elif [[ $cur == -* ]]; then
        local opts
        opts=$(_rlock_options "$sub")
        [[ $sub == run ]] && ((key_seen)) && opts+=$'\n--'
        _rlock_reply -W "$opts" -- "$cur"
    elif [[ $sub == status || $sub == log || $sub == check || $sub == metrics ]] || { [[ $sub == run || $sub == release || $sub == extend ]] && ((!nargs)); }; then
        # KEY: the locks held now on the server the line selects. (list's
        # PATTERN is free text.)
        local name want q
        want=$(_rlock_dequote "$cur")
        while IFS= read -r name; do
            [[ -n $name && $name == "$want"* ]] || continue
            printf -v q '%q' "$name"
            COMPREPLY+=("$q")
        done < <(_rlock_lock_names "${words[0]}")
    fi

    if [[ -n $ltrim ]]; then
        COMPREPLY=("${COMPREPLY[@]#"$ltrim"}")
    fi
    return 0
}

complete -F _rlock rlock
