-- Shared by every lock script (the build puts the protocol's prelude and this in front of each).
--
-- The keys of one lock, all under its hash tag and all declared by the caller, in the order of
-- lock/name.hpp (LockName::script_keys) and src/lock/protocol.txt (key; KEY: each one's index):
--   lock   PREFIX{KEY}: the exclusive holder's token (PX: its lease), or a lingering mark
--   fence  fencing counter
--   info   the exclusive holder: HASH id, its who (host pid user cmd), since fence ttl claimed ...
--   q      the queue: ZSET id -> arrival (server microseconds, made unique; below 0: preemptors)
--   w      the waiters: HASH "<id>.<field>"
--   wl     the waiters' leases: ZSET id -> expiry (server ms)
--   h      shared and semaphore holders: ZSET id -> expiry (server ms)
--   hi     their data: HASH "<id>.<field>"
--   sem    the semaphore: HASH limit, next (the highest slot handed out so far)
--   free   semaphore slots given back: ZSET slot -> slot
--   sq     the waiters that asked to supersede older ones: ZSET id -> arrival
--   gone   waiters told to leave (superseded): ZSET id -> when the notice lapses
--   log    the lock's history: STREAM
--   tick   --once-per: the last tick run: HASH t p h at id (and pt ph pa: the one before)
--   mb     the caller's mailbox: pushed when its hold or its place ends
--   sum    the lock's summary: HASH of fixed fields (see summarize)
--   ep     what waiters see: STRING "epoch due [head]" (see view_epoch)
-- A contender's id is the first 16 characters of its token (the rest, 128 bits, is the secret).
-- Every script's arguments are named in protocol.txt (call; A.CALL.ARG: each one's index), after
-- the configuration (config; CFG).
--
-- Waiting: each waiter blocks (BLPOP, outside Lua) on its own mailbox and on the mailbox of the
-- one just before it in the queue, or at the head, of the holders; whoever leaves pushes its own
-- mailbox. The next live waiter is granted the lock in the script that frees it (a claim window
-- of CLAIM); it claims the grant in its next wait step. A waiter whose lease in the queue (LEASE,
-- renewed by its heartbeat) ran out is dead: it is skipped and dropped, never granted. A grant
-- not claimed in time lapses and goes to the next one. A granted waiter that watched someone
-- else than the caller is named in the reply, and the caller pushes its mailbox.
--
-- Bounded work: no script removes, grants or reports more than BUDGET entries, whatever the
-- queue holds. What is left is reported (the reply's `more`), and the caller calls again at once:
-- the rest is amortised over calls, and no call can stall the server for its other clients.

local BUDGET = 20

-- The context of one call: everything the call knows, set by begin() at its start (every script,
-- and every function of the library, begins with begin(KEYS, ARGV)) and replaced by the next
-- call's, so that nothing of one call is seen by the next. K and NOW are two of its fields under
-- short names, set with it:
--   K            the call's keys by their Lua name (K.lock, K.info...), each looked up on first use
--   NOW          the server's clock (ms); now_us: in us, as a string; now_arg: NOW as a string
--   lease claim mailbox history log_length (numbers), keep log_length_arg (as given), summary
--                the configuration (CFG; a number given to redis.call is formatted at each call,
--                which costs more than the command it is for: the strings are kept as given)
--   work more    entries removed, granted or reported so far; the budget ran out with work left
--   push         ids whose mailboxes the caller pushes after the script
--   caller       the caller's id
--   change       what waiters see changed: nil, 'due' or 'view' (see changed)
--   joined       the score of the place this call gave the caller in the queue (enqueue), or nil
-- and what it knows already, which a write may make stale (see wrote):
--   quiet        nil: not asked yet; true: no queue, no shared holder, notice or semaphore
--   reaped       the dead entries due now are gone (reap ran to the end)
--   noted        the lock's key is free and no expired holder is left to record
--   lock_read    lock_value holds the lock key's value (false: none): the key has not been
--   lock_value   written since it was read (a script's clock stands still: no expiry)
--   view         what check_types read of the holder, while it holds (current_view)
--   no_sem       :sem and :free are known missing (tidy_limit)
--   info_clean   :info is missing, or has no field a grant would not overwrite
--   history_until  the history and the summary, where they exist, expire no earlier (or nil)
local C, K, NOW

local KEYS_BY_NAME = {__index = function(keys, name)
  local key = C.keys[KEY[name]]
  keys[name] = key
  return key
end}

local function begin(keys, argv)
  local t = redis.call('TIME')
  -- (No arithmetic and no formatting of numbers: the microseconds padded to 6 digits, and the
  -- milliseconds are the digits before the last 3.)
  local us = t[2]
  local now_us = t[1] .. string.sub('00000', #us) .. us
  local now_arg = string.sub(now_us, 1, -4)
  C = {keys = keys, args = argv, k = setmetatable({}, KEYS_BY_NAME),
       lease = tonumber(argv[CFG.lease]), claim = tonumber(argv[CFG.claim]), mailbox = argv[CFG.mailbox],
       history = tonumber(argv[CFG.history]), keep = argv[CFG.keep], log_length = tonumber(argv[CFG.log_length]),
       log_length_arg = argv[CFG.log_length], summary = argv[CFG.summary] ~= '0',
       now = tonumber(now_arg), now_us = now_us, now_arg = now_arg,
       work = 0, more = false, push = {}, caller = '', change = nil, joined = nil,
       quiet = nil, reaped = false, noted = false, lock_read = false, lock_value = false, view = nil,
       no_sem = false, info_clean = false, history_until = nil}
  K, NOW = C.k, C.now
end

-- An argument of the call, by its index (A.CALL.ARG).
local function arg(i)
  return C.args[i]
end

local function has(options, letter)
  return string.find(options or '', letter, 1, true) ~= nil
end

local function id_of(token)
  return string.sub(token, 1, 16)
end

-- ---- Records: the fields of a record (protocol.txt: record) as a place names them.

-- A record read from a call's arguments, from index at on.
local function record_args(record, at)
  local r = {}
  for i, name in ipairs(record.names) do r[name] = C.args[at + i - 1] or '' end
  return r
end

-- A record read from values by field (hmget's), as the place (RECORD.NAME.KIND) names them.
local function record_from(record, place, values)
  local r, fields = {}, record[place]
  for i, name in ipairs(record.names) do r[name] = values[fields[i]] or '' end
  return r
end

-- Appends record r's fields, as the place names them (after prefix: "<id>." in :w and :hi), and
-- their values to the field list out; returns out.
local function put_record(out, record, place, r, prefix)
  local fields = record[place]
  prefix = prefix or ''
  for i, name in ipairs(record.names) do
    out[#out + 1] = prefix .. fields[i]
    out[#out + 1] = r[name] or ''
  end
  return out
end

-- Appends the field/value pairs of list to out; returns out.
local function put(out, list)
  for i = 1, #list do out[#out + 1] = list[i] end
  return out
end

-- Who a contender is, for notices: its who's fields joined by tabs ("host\tpid\tuser\tcmd").
local function who_text(who)
  local out = {}
  for i, name in ipairs(RECORD.who.names) do out[i] = who[name] or '' end
  return table.concat(out, '\t')
end

-- "<id>.FIELD" of each field of names.
local function fields_of(id, names)
  local out = {}
  for i, f in ipairs(names) do out[i] = id .. '.' .. f end
  return out
end

-- HMGET of the fields of hash key, as a table keyed by field (false: missing).
local function hmget(key, ...)
  local names = {...}
  local v = redis.call('HMGET', key, ...)
  local out = {}
  for i, f in ipairs(names) do out[f] = v[i] end
  return out
end

-- The same for the fields of id in a hash of "<id>.FIELD" (:w, :hi), keyed by FIELD.
local function hmget_of(key, id, names)
  local v = redis.call('HMGET', key, unpack(fields_of(id, names)))
  local out = {}
  for i, f in ipairs(names) do out[f] = v[i] end
  return out
end

-- The field names a place keeps of a record, then the others given (for one HMGET).
local function with_record(record, place, ...)
  local out = {}
  for i, f in ipairs(record[place]) do out[i] = f end
  return put(out, {...})
end

-- ---- What the call knows, and what a write changes of it.

local changed  -- what waiters see changed (defined below)

-- What a write changes of what the call knows, and of what waiters see (changed): every write to
-- the lock's structures that the call's own reads rely on says which it made.
--   'lock'   the lock's key was written: value, its new value when the call knows it (false: the
--            key is gone), nil to read it again; the view of its holder is gone
--   'lease'  only the lock's lease (a claim): the view of its holder is gone
--   'queue'  the queue, the shared holders or the notices: the lock is not quiet
--   'slots'  :sem or :free: not known missing
--   'info'   :info was deleted (value true: clean) or written with fields a grant overwrites
--            (false: the next grant must delete it first)
-- how: what waiters see ('due' or 'view', see changed; nil: nothing they see).
local function wrote(what, value, how)
  local c = C
  if what == 'lock' then
    c.lock_read, c.lock_value, c.view = value ~= nil, value or false, nil
    if value == false then c.noted, c.info_clean = true, true end
  elseif what == 'lease' then
    c.view = nil
  elseif what == 'queue' then
    c.quiet = false
  elseif what == 'slots' then
    c.no_sem = false
  elseif what == 'info' then
    c.info_clean = value
  end
  if how then changed(how) end
end

-- The lock key's value (false: none), read once until the call writes the key.
local function lock_value()
  local c = C
  if not c.lock_read then
    c.lock_value = redis.call('GET', K.lock)
    c.lock_read = true
  end
  return c.lock_value
end

-- Whether nobody waits, holds shared, has a notice or a semaphore slot (one command, asked once
-- per call; a call that writes any of these structures says so: wrote('queue')). Everything that
-- walks them (reaping, handing on, expiries) is then skipped: the uncontended case touches only
-- the keys it needs.
local function quiet()
  local c = C
  if c.quiet == nil then c.quiet = redis.call('EXISTS', K.q, K.wl, K.h, K.gone, K.sem, K.free) == 0 end
  return c.quiet
end

local function spend()
  local c = C
  if c.work >= BUDGET then
    c.more = true
    return false
  end
  c.work = c.work + 1
  return true
end

-- ---- The history's expiry.

-- The history (K.log) and the summary (K.sum) expire HISTORY after the last event, give or take
-- its slack (keep, CFG.keep: the history plus a sixteenth of it, at most an hour): an event whose
-- keys are known to last that long already (history_until, from :info's hx, which the grant that
-- set it made true) does not set their expiries again. Each expiry set is keep, so that they only
-- ever move later: the keys last at least HISTORY, at most keep, after the last event. A key an
-- event creates gets its expiry then.
local function history_known(until_ms)
  local at = tonumber(until_ms or '')
  local c = C
  if at and (not c.history_until or at > c.history_until) then c.history_until = at end
end

local function history_kept()
  local c = C
  return c.history_until ~= nil and c.history_until >= NOW + c.history
end

local function keep_history_key(key)
  redis.call('PEXPIRE', key, C.keep)
end

-- Makes the history and the summary last at least HISTORY from now; returns until when (for hx).
local function keep_history()
  local c = C
  if not history_kept() then
    keep_history_key(K.log)
    keep_history_key(K.sum)
    c.history_until = NOW + tonumber(c.keep)
  end
  return c.history_until
end

-- ---- The holder, as the call read it.

-- Whether the string at the lock's key is rlock's: a holder's token (48 hex digits) or a lingering
-- mark (~ and the id), always with an expiry, of the holder that :info names (if it names one).
-- What it reads of the holder is kept for holder_view (view), which then reads nothing again.
local function lock_value_ours(value)
  local pttl = redis.call('PTTL', K.lock)
  if pttl < 0 then return false end
  local id
  if #value == 48 and not string.find(value, '[^0-9a-f]') then
    id = string.sub(value, 1, 16)
  elseif #value == 17 and string.sub(value, 1, 1) == '~' and not string.find(value, '[^0-9a-f]', 2) then
    id = string.sub(value, 2)
  else
    return false
  end
  local v = hmget(K.info, unpack(with_record(RECORD.who, 'info', INFO.id, INFO.since, INFO.lingering,
                                             INFO.history)))
  local holder = v[INFO.id]
  if holder and holder ~= id then return false end
  C.view = {value = value, pttl = pttl, info = v, who = record_from(RECORD.who, 'info', v)}
  history_known(v[INFO.history])
  return true
end

-- token: the caller's, if it has one (a GET that returns it proves the value rlock's). What the
-- call already read of the lock's key (a string or none: lock_read), and found rlock's (view), is
-- not read again.
local function check_types(token)
  local c = C
  local value
  if c.lock_read then
    value = c.lock_value
  else
    value = redis.pcall('GET', K.lock)
    if type(value) == 'table' and value.err then
      local kind = redis.call('TYPE', K.lock)['ok']
      return redis.error_reply('WRONGTYPE ' .. K.lock .. ' holds a ' .. kind .. ', not an rlock lock')
    end
  end
  if value and value ~= token and not (c.view and c.view.value == value) and not lock_value_ours(value) then
    return redis.error_reply('RLOCKFOREIGN lock')
  end
  c.lock_read, c.lock_value = true, value
  return nil
end

-- What check_types read of the holder (view) while it still holds: the lock's key has the value
-- it had, and neither the key nor its lease has been written since (wrote 'lock' or 'lease');
-- else nil. (:info's fields that the view keeps are written only with the key. Its PTTL is the
-- lease as read then: a script's clock runs on, so a later PTTL could be a millisecond or so
-- smaller, and NOW, read before it, plus it is still no later than the lease's end.)
local function current_view()
  local view = C.view
  if view and lock_value() == view.value then return view end
  return nil
end

-- ---- What waiters see changed.

-- The epoch of what waiters see, for the light heartbeat (beat.lua). K.ep holds "epoch due
-- [head]": the epoch (the server's clock in us when it began: never the same twice); until when
-- no waiter's lease can have run out (0: a light step never stands for a full one): the first
-- lease to end; and the id of a waiter whose next step must be a full one (the head of the queue,
-- after a change that made it so). A step that changes nothing keeps the epoch and sets the due
-- time again. The light step renews the caller's lease only before the first lease ends, so the
-- queue's keys still outlive it by the claim window (set_expiries). The holders' leases are the
-- head's to watch: its heartbeat ends when the holder's lease does, and that step is a full one
-- (lock::wait_turn), which hands the lock on if the holder is gone; should the head be gone too,
-- its lease runs out, and the next waiter's step is a full one.
--
-- What a write changes for the waiters (changed): 'view' drops the epoch, and every waiter's next
-- step is a full one (a shared grant, a preempt request, a waiter gone, a lease cut short...).
-- 'due' keeps it: the change is an exclusive hand-off (the holder's release and the grant to the
-- head of the queue) or a waiter that joined at the end, which change for the others behind only
-- who is the head and when a lease ends: the due time is set again from the leases as they are
-- now, and the head is named, so that its next step is a full one; the others' light steps go on
-- (their positions, and the holder they show, are the next full step's: the caller takes one
-- before it shows them, see lock::wait_turn). A claim changes only the holder's lease: nothing.
-- Said once per call, when it replies (reply) or shows a waiter the epoch (view_epoch).
local function epoch_due()
  local first = redis.call('ZRANGE', K.wl, 0, 0, 'WITHSCORES')[2]
  return first and tonumber(first) or 0
end

local function set_epoch(epoch, due, head)
  redis.call('SET', K.ep, epoch .. ' ' .. due .. (head and (' ' .. head) or ''), 'PX',
             math.max(due - NOW, 0) + C.lease + C.claim)
end

-- The epoch as K.ep has it, and the head it names (nil when none).
local function current_epoch()
  local v = redis.pcall('GET', K.ep)
  if type(v) ~= 'string' then return nil end
  local epoch, _, head = string.match(v, '^(%d+) (%d+) ?(%x*)$')
  return epoch, head ~= '' and head or nil
end

-- Says what this call changed for the waiters (see changed), once: the epoch dropped, or kept
-- with the due time set again and the head named. A quiet lock has no waiter to tell.
local function publish_change()
  local c = C
  local how = c.change
  c.change = nil
  if not how or quiet() then return end
  if how == 'view' then
    redis.call('DEL', K.ep)
    return
  end
  local epoch = current_epoch()
  if not epoch then return end  -- (none: the next full step begins one)
  set_epoch(epoch, epoch_due(), redis.call('ZRANGE', K.q, 0, 0)[1])
end

changed = function(how)
  local c = C
  if how == 'view' or not c.change then c.change = how end
end

-- The reply of every script: {code, more (0/1), {ids to push}, payload...}.
local function reply(code, ...)
  publish_change()
  local c = C
  return {code, c.more and 1 or 0, c.push, ...}
end

-- An error reply, once the call has said what it changed.
local function refuse(err)
  publish_change()
  return err
end

-- ---- The history and the summary.

-- Keeps the lock's summary (K.sum), for rlock check and metrics, even without a history: a count
-- per kind of event (n.KIND); the last start (s, sh, si: when, host, id); the last end of a hold
-- (e, ek kind, eh host, ex exit status, ed ms held, ei id, eo outcome: how its holder said it
-- ended); the last success, a release (not forced) whose holder said it succeeded, outcome ok
-- (ok, okh, okx, okd); since then, the holds lost (sl: lost or expired) and the holds that ended
-- without success (sf: failures in a row; a preempted hold is neither). A hold given back unused
-- (returned) that was the last start puts the last start back to the start of the last hold that
-- ended (for an exclusive lock, the one before it). Fixed fields; it expires with the history.
-- Calls that only clean up after a failed attempt (summary off) leave it alone, and so does
-- another program's data at its key. at: the event's time (ms, a string), the one its history
-- entry has (the entry's id is taken when the XADD runs, a millisecond or so after the call's
-- clock was read). counted: the hold's end is in the summary's counts already (its expiry,
-- recorded by the next holder, and now its holder's own record of the loss): the last end takes
-- its details, the counts of holds do not move.
local function summarize(kind, ev, at, counted)
  if not C.summary then return end
  local count = redis.pcall('HINCRBY', K.sum, SUM.count .. kind, '1')
  if type(count) == 'table' then return end
  -- (The fields it reads, without a table of them: an event has a few.)
  local host, exit, held, by, id, outcome = '', '', '', '', '', ''
  for i = 1, #ev, 2 do
    local f = ev[i]
    if f == EV.host then host = ev[i + 1] or ''
    elseif f == EV.exit then exit = ev[i + 1] or ''
    elseif f == EV.held then held = ev[i + 1] or ''
    elseif f == EV.by then by = ev[i + 1] or ''
    elseif f == EV.id then id = ev[i + 1] or ''
    elseif f == EV.outcome then outcome = ev[i + 1] or '' end
  end
  if kind == EVENT.acquired then
    redis.call('HSET', K.sum, SUM.started, at, SUM.started_host, host, SUM.started_id, id)
  elseif kind == EVENT.returned then
    local v = hmget(K.sum, SUM.started_id, SUM.ended, SUM.ended_held, SUM.ended_host)
    if v[SUM.started_id] == id and id ~= '' then
      local ended, ended_held = tonumber(v[SUM.ended] or ''), tonumber(v[SUM.ended_held] or '') or 0
      if ended then
        redis.call('HSET', K.sum, SUM.started, string.format('%d', ended - ended_held), SUM.started_host,
                   v[SUM.ended_host] or '', SUM.started_id, '')
      else
        redis.call('HDEL', K.sum, SUM.started, SUM.started_host, SUM.started_id)
      end
    end
  elseif kind == EVENT.released or kind == EVENT.lost or kind == EVENT.preempted or kind == EVENT.expired then
    if kind == EVENT.released and outcome == OUTCOME.success and by == '' then
      redis.call('HSET', K.sum, SUM.ended, at, SUM.ended_kind, kind, SUM.ended_host, host, SUM.ended_exit, exit,
                 SUM.ended_held, held, SUM.ended_id, id, SUM.ended_outcome, outcome, SUM.success, at,
                 SUM.success_host, host, SUM.success_exit, exit, SUM.success_held, held, SUM.lost_since_success, '0',
                 SUM.failed_since_success, '0')
    else
      redis.call('HSET', K.sum, SUM.ended, at, SUM.ended_kind, kind, SUM.ended_host, host, SUM.ended_exit, exit,
                 SUM.ended_held, held, SUM.ended_id, id, SUM.ended_outcome, outcome)
      if not counted then
        if kind == EVENT.lost or kind == EVENT.expired then
          redis.call('HINCRBY', K.sum, SUM.lost_since_success, '1')
        end
        if kind ~= EVENT.preempted and outcome ~= OUTCOME.preempted then
          redis.call('HINCRBY', K.sum, SUM.failed_since_success, '1')
        end
      end
    end
  end
  -- (A count of 1: the key may be new.)
  if count == 1 or not history_kept() then keep_history_key(K.sum) end
end

-- How the end of the hold id was recorded, if it was: the kind of its end (released, lost,
-- preempted or expired), as the summary's last end or one of the history's last 16 events says.
local function recorded_end(id)
  local v = redis.pcall('HMGET', K.sum, SUM.ended_id, SUM.ended_kind)
  if type(v) == 'table' and not v.err and v[1] == id then return v[2] end
  if C.log_length == 0 then return nil end
  local entries = redis.pcall('XREVRANGE', K.log, '+', '-', 'COUNT', 16)
  if type(entries) ~= 'table' or entries.err then return nil end
  for _, entry in ipairs(entries) do
    local f, kind, who = entry[2], nil, nil
    for i = 1, #f, 2 do
      if f[i] == EV.kind then kind = f[i + 1] elseif f[i] == EV.id then who = f[i + 1] end
    end
    if who == id and (kind == EVENT.released or kind == EVENT.lost or kind == EVENT.preempted or
                      kind == EVENT.expired) then
      return kind
    end
  end
  return nil
end

-- Appends one event to the lock's history (0: no history). ev: field list (a value that is false,
-- or empty, is left out). The stream keeps at least log_length events: MAXLEN ~ trims whole nodes
-- of the stream (up to about 100 events more), where an exact MAXLEN would cut inside a node on
-- every append, at several times the cost. counted: see summarize.
local function event(kind, ev, counted)
  local c = C
  if c.log_length == 0 then return summarize(kind, ev, c.now_arg, counted) end
  -- NOMKSTREAM: an XADD that would create the stream says so (nil), and is made again without it.
  local args = {K.log, 'NOMKSTREAM', 'MAXLEN', '~', c.log_length_arg, '*', EV.kind, kind}
  local n = 8
  for i = 1, #ev, 2 do
    local x = ev[i + 1]
    if x and x ~= '' then
      args[n + 1], args[n + 2] = ev[i], x
      n = n + 2
    end
  end
  local added = redis.pcall('XADD', unpack(args))
  if type(added) == 'table' then
    if added.err and not string.find(added.err, 'WRONGTYPE', 1, true) then
      added = false  -- a server without NOMKSTREAM (before 6.2)
    elseif added.err then
      error(added)
    end
  end
  if not added then
    table.remove(args, 2)
    added = redis.call('XADD', unpack(args))
    keep_history_key(K.log)
  elseif not history_kept() then
    keep_history_key(K.log)
  end
  summarize(kind, ev, string.match(added, '^%d+') or c.now_arg, counted)
end

-- An event's fields for who: its record, then the pairs of more.
local function who_event(who, more)
  return put(put_record({}, RECORD.who, 'event_field', who), more)
end

-- ---- Fences, mailboxes and the queue's entries.

-- The next fencing token. A missing counter (never used, idle past HISTORY, or lost to a restart)
-- starts from the server's clock in microseconds: above every value it handed out before.
--
-- One INCR in the common case. The counter is set (with its expiry) when INCR created it. Its
-- value tells its age: it started from the clock and goes up by one a grant, far slower than the
-- clock. Its expiry is set again only when it is older than HISTORY / 2 by that measure, or ahead
-- of the clock (a Redlock merge from a master whose clock is ahead, a clock stepped back), or set
-- by hand: it is kept at least HISTORY / 2 past its last use (a missing one resumes above anyway).
-- counted: what the caller's INCR gave (a number), if it sent it.
local function next_fence(counted)
  local fence = counted or redis.pcall('INCR', K.fence)
  -- Another program's data (a hash, a word): say which of the lock's keys it is.
  if type(fence) == 'table' and fence.err then error(refuse(redis.error_reply('RLOCKFOREIGN fence'))) end
  local now_us = tonumber(C.now_us)
  local history = C.history
  if fence == 1 then
    fence = now_us + 1
    redis.call('SET', K.fence, string.format('%.0f', fence), 'PX', history)
  elseif fence > now_us or now_us - fence > history * 500 then
    redis.call('PEXPIRE', K.fence, history)
  end
  return fence
end

local function wake(mailbox)
  redis.call('LPUSH', mailbox, '1')
  redis.call('LTRIM', mailbox, 0, 0)
  redis.call('PEXPIRE', mailbox, C.mailbox)
end

local preempt_next  -- asks the holder to stop for the first preemptor still waiting (defined below)

-- Whether id waits in the queue and is alive (its lease there has not run out).
local function still_waiting(id)
  local lease = redis.call('ZSCORE', K.wl, id)
  return lease and tonumber(lease) > NOW
end

-- Takes waiter id out of the queue; granted: to hand it the lock (waiters see only a new head,
-- see changed). A preemptor that leaves withdraws its request to the holder, unless the holder has
-- seen it (ps: it is stopping); the next preemptor, if any, asks instead.
local function remove_waiter(id, granted)
  changed(granted and 'due' or 'view')
  redis.call('ZREM', K.q, id)
  redis.call('ZREM', K.wl, id)
  redis.call('ZREM', K.sq, id)
  redis.call('HDEL', K.w, unpack(fields_of(id, WAITER_ALL)))
  -- (A clean :info names no preemptor.)
  if C.info_clean then return end
  local asked = hmget(K.info, INFO.preemptor, INFO.preempt_seen)
  if asked[INFO.preemptor] == id and asked[INFO.preempt_seen] ~= '1' then
    redis.call('HDEL', K.info, INFO.preempt_by, INFO.preemptor)
    changed('view')
    preempt_next()
  end
end

local function semaphore_limit()
  return tonumber(redis.call('HGET', K.sem, SEM.limit) or '1')
end

local function take_slot(limit)
  local given = redis.call('ZPOPMIN', K.free)
  if given[1] then return given[1] end
  local n = redis.call('HINCRBY', K.sem, SEM.next, 1)
  if n <= limit then return tostring(n) end
  return ''
end

local function remove_holder(id)
  changed('view')
  redis.call('ZREM', K.h, id)
  local slot = redis.call('HGET', K.hi, id .. '.' .. HOLDER.slot)
  if slot and slot ~= '' then
    redis.call('ZADD', K.free, slot, slot)
    wrote('slots')
  end
  redis.call('HDEL', K.hi, unpack(fields_of(id, HOLDER_ALL)))
end

local function holder_event(kind, id, extra)
  local v = hmget_of(K.hi, id, with_record(RECORD.who, 'holder', HOLDER.fence, HOLDER.since))
  local ev = who_event(record_from(RECORD.who, 'holder', v), {EV.fence, v[HOLDER.fence], EV.id, id})
  if v[HOLDER.since] then put(ev, {EV.held, tostring(NOW - tonumber(v[HOLDER.since]))}) end
  event(kind, put(ev, extra or {}))
end

-- The exclusive holder whose lease ran out without a release (it died, or was cut off): its
-- lock is handed on; the history says so. `info` outlives the lock for that.
local function note_expired()
  local c = C
  if c.noted then return end
  if lock_value() then return end
  c.noted = true
  local v = hmget(K.info, unpack(with_record(RECORD.who, 'info', INFO.id, INFO.fence, INFO.since, INFO.expires,
                                             INFO.claimed, INFO.lingering, INFO.preempt_by, INFO.preemptor,
                                             INFO.preempt_seen, INFO.keeper, INFO.watched, INFO.tick,
                                             INFO.tick_period)))
  if not v[INFO.id] then
    -- (What a grant does not overwrite: none of it is there, so the grant need not delete :info.)
    c.info_clean = not (v[INFO.lingering] or v[INFO.preempt_by] or v[INFO.preemptor] or v[INFO.preempt_seen] or
                        v[INFO.keeper] or v[INFO.watched] or v[INFO.tick])
    return
  end
  if v[INFO.claimed] == '1' and v[INFO.lingering] ~= '1' then
    local held = ''
    if v[INFO.since] and v[INFO.expires] then held = tostring(tonumber(v[INFO.expires]) - tonumber(v[INFO.since])) end
    event(EVENT.expired, who_event(record_from(RECORD.who, 'info', v),
                                   {EV.fence, v[INFO.fence], EV.held, held, EV.id, v[INFO.id], EV.tick, v[INFO.tick],
                                    EV.period, v[INFO.tick_period]}))
  end
  redis.call('DEL', K.info)
  wrote('info', true)
end

-- Removes dead entries, at most the budget: waiters whose lease ran out, holders whose lease ran
-- out (a claimed one's end goes into the history), and notices nobody came for.
local function reap()
  local c = C
  if c.reaped or quiet() then return end
  if c.work >= BUDGET then c.more = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.wl, '-inf', NOW, 'LIMIT', 0, BUDGET - c.work)) do
    spend()
    remove_waiter(id)
  end
  if c.work >= BUDGET then c.more = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.h, '-inf', NOW, 'LIMIT', 0, BUDGET - c.work)) do
    spend()
    local v = hmget_of(K.hi, id, {HOLDER.claimed, HOLDER.lingering})
    if v[HOLDER.claimed] == '1' and v[HOLDER.lingering] ~= '1' then holder_event(EVENT.expired, id) end
    remove_holder(id)
  end
  if c.work >= BUDGET then c.more = true return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.gone, '-inf', NOW, 'LIMIT', 0, BUDGET - c.work)) do
    spend()
    redis.call('ZREM', K.gone, id)
    redis.call('HDEL', K.w, id .. '.' .. WAITER.superseded_by)
  end
  c.reaped = c.work < BUDGET
end

-- The semaphore's N stays only while someone holds or waits.
local function tidy_limit()
  local c = C
  if quiet() or c.no_sem then return end
  if redis.call('EXISTS', K.sem, K.free) == 0 then
    c.no_sem = true
    return
  end
  if redis.call('ZCARD', K.h) == 0 and redis.call('ZCARD', K.q) == 0 then
    redis.call('DEL', K.sem, K.free)
    c.no_sem = true
  end
end

-- Every structure expires when nothing in it can matter any more: the holders' after the last
-- lease, the queue's after the last waiter's lease; nothing stays behind an unused lock.
local function set_expiries()
  if quiet() then return end
  local margin = C.lease + C.claim
  local held = redis.call('ZRANGE', K.h, -1, -1, 'WITHSCORES')[2]
  local waited = redis.call('ZRANGE', K.wl, -1, -1, 'WITHSCORES')[2]
  local notice = redis.call('ZRANGE', K.gone, -1, -1, 'WITHSCORES')[2]
  if held then
    local at = tonumber(held) + margin
    redis.call('PEXPIREAT', K.h, at)
    redis.call('PEXPIREAT', K.hi, at)
  end
  local queue_end = waited and tonumber(waited) + margin or nil
  if queue_end then
    redis.call('PEXPIREAT', K.q, queue_end)
    redis.call('PEXPIREAT', K.wl, queue_end)
    redis.call('PEXPIREAT', K.sq, queue_end)
  end
  local w_end = queue_end
  if notice and (not w_end or tonumber(notice) > w_end) then w_end = tonumber(notice) end
  if w_end then redis.call('PEXPIREAT', K.w, w_end) end
  if notice then redis.call('PEXPIREAT', K.gone, tonumber(notice)) end
  local sem_end = held and tonumber(held) + margin or nil
  if queue_end and (not sem_end or queue_end > sem_end) then sem_end = queue_end end
  if sem_end and not C.no_sem then
    redis.call('PEXPIREAT', K.sem, sem_end)
    redis.call('PEXPIREAT', K.free, sem_end)
  end
end

-- Refuses a contender whose kind of hold (x exclusive, s shared, n a semaphore of limit) does not
-- fit the lock as others use it.
local function check_mode(mode, limit)
  -- Dead holders and waiters first: a semaphore whose holders all died is no semaphore any more.
  reap()
  note_expired()
  tidy_limit()
  local stored = not quiet() and not C.no_sem and redis.call('HGET', K.sem, SEM.limit)
  if mode == 'n' then
    if stored and tonumber(stored) ~= limit then
      return refuse(redis.error_reply('RLOCKLIMIT ' .. stored .. ' ' .. limit))
    end
    if not stored and (lock_value() or
                       (not quiet() and (redis.call('ZCARD', K.h) > 0 or redis.call('ZCARD', K.q) > 0))) then
      return refuse(redis.error_reply('RLOCKLIMIT 1 ' .. limit))
    end
  elseif stored then
    return refuse(redis.error_reply('RLOCKLIMIT ' .. stored .. ' 1'))
  end
  return nil
end

-- Whether a contender of this kind could hold the lock now (the queue aside).
local function can_take(mode, limit)
  if mode == 'n' then return quiet() or redis.call('ZCARD', K.h) < limit end
  if lock_value() then return false end
  return mode == 's' or quiet() or redis.call('ZCARD', K.h) == 0
end

-- Until when a hold claimed now is kept at least with --min-hold (ms): '' for none. The lease
-- lasts that long (a holder that dies keeps the lock so long); the lingering after a release is
-- the release's to say (scripts/release.lua).
local function min_hold_until(min_hold)
  if min_hold and tonumber(min_hold) and tonumber(min_hold) > 0 then return tostring(NOW + tonumber(min_hold)) end
  return ''
end

-- The lease to set: the TTL, or longer when --min-hold keeps the lock until linger_until.
local function lease_ms(ttl, linger_until)
  local px = tonumber(ttl)
  if linger_until and linger_until ~= '' and tonumber(linger_until) - NOW > px then
    px = tonumber(linger_until) - NOW
  end
  return px
end

-- ---- --once-per.

-- (Exclusive holds only; d.tick is nil without it.) A contender's tick is when it fired, by the
-- server's clock: the time of the call less its age (how long ago it started, on its own monotonic
-- clock), so that no host's wall clock counts, nor where the schedule sits from the epoch. Two
-- fire times are one tick when they are less than half a period apart, counted from the tick that
-- last ran: ticks_after(t, d) is how many periods after tick t the contender fired, rounded to
-- the nearest (0: the same tick).
--
-- A tick is pending while the hold that took the lock for it has not started its command: that
-- is only :info's tk, which ends with the hold (a lapse, any give-back), and a contender of that
-- tick waits for the lock as any other (with -n: busy). It ran once its holder marked it, right
-- before it starts its command (tick_mark): :tick then records it, and every contender of that
-- tick, or of an earlier one, is refused (tick_refusal).
local function ticks_after(t, d)
  return math.floor((d.tick - t) / d.period + 0.5)
end

-- The refusal of a contender whose tick ran: the reply's payload {tick that ran, its host, when
-- (server ms), now, the contender's own tick}, and a busy event that says so; nil to go on.
local function tick_refusal(id, d)
  if not d.tick then return nil end
  local v = hmget(K.tick, TICK.tick, TICK.host, TICK.at, TICK.id)
  local ran = tonumber(v[TICK.tick] or '')
  if not ran or v[TICK.id] == id or ticks_after(ran, d) > 0 then return nil end
  event(EVENT.busy, who_event(d.who, {EV.tick, v[TICK.tick], EV.period, d.period, EV.by, v[TICK.host], EV.id, id}))
  -- The payload of the reply tick_done (AT.tick_done).
  return {v[TICK.tick], v[TICK.host] or '', v[TICK.at] or '', NOW, d.tick}
end

-- The holder's tick when the lock is held for an earlier tick than contender d's (the run of the
-- tick before still holds it: an overrun), else ''.
local function tick_overrun(d)
  if not d.tick or not lock_value() then return '' end
  local held = tonumber(redis.call('HGET', K.info, INFO.tick) or '')
  if held and ticks_after(held, d) > 0 then return held end
  return ''
end

-- A hold taken for a tick: pending, on the hold's own record.
local function tick_take(d)
  if d.tick then redis.call('HSET', K.info, INFO.tick, d.tick, INFO.tick_period, d.period) end
end

-- The holder id marks its tick run (its command starts now): :tick records it, with the record it
-- replaces; the waiters of that tick leave at their next full step (tick_refusal).
local function tick_mark(id)
  local held = hmget(K.info, INFO.tick, INFO.tick_period, INFO.host)
  if not held[INFO.tick] then return end
  local v = hmget(K.tick, TICK.tick, TICK.host, TICK.at, TICK.id)
  if v[TICK.id] ~= id then
    redis.call('HSET', K.tick, TICK.tick, held[INFO.tick], TICK.period, held[INFO.tick_period] or '', TICK.host,
               held[INFO.host] or '', TICK.at, NOW, TICK.id, id, TICK.previous, v[TICK.tick] or '',
               TICK.previous_host, v[TICK.host] or '', TICK.previous_at, v[TICK.at] or '')
  end
  redis.call('PEXPIRE', K.tick, C.history)
  redis.call('HSET', K.info, INFO.tick_ran, 1)
  changed('view')
end

-- The give-back of a hold that marked its tick and then proved that its command never started
-- (the guard refused it): the record it replaced is put back, unless a later hold replaced it.
-- Held or not: the hold's lease may have run out meanwhile, and no run of that tick can have
-- taken the lock since (the record refused it).
local function tick_return(id)
  local v = hmget(K.tick, TICK.id, TICK.previous, TICK.previous_host, TICK.previous_at)
  if v[TICK.id] ~= id then return end
  local previous = v[TICK.previous]
  if not previous or previous == '' then return redis.call('DEL', K.tick) end
  redis.call('HSET', K.tick, TICK.tick, previous, TICK.host, v[TICK.previous_host], TICK.at, v[TICK.previous_at],
             TICK.id, '', TICK.previous, '', TICK.previous_host, '', TICK.previous_at, '')
end

-- ---- Taking the lock.

-- The exclusive holder's record in :info, and its lease: d (the contender), its id and fence, its
-- lease px and linger_until; claimed: 1 when it holds for its lease, 0 while only granted.
-- grant writes it, as does the uncontended acquire (acquire.lua): one writer for both.
local function write_info(id, d, fence, px, claimed, linger_until)
  local c = C
  local fields = put_record({INFO.id, id, INFO.version, VERSION}, RECORD.who, 'info', d.who)
  local preemptible = has(d.options, OPT.preemptible) and '1' or '0'
  put(fields, {INFO.since, c.now_arg, INFO.fence, fence, INFO.ttl, d.ttl, INFO.claimed, claimed, INFO.expires,
               NOW + px, INFO.linger_until, linger_until, INFO.preemptible, preemptible,
               INFO.joined, d.joined or c.now_arg, INFO.history, keep_history()})
  redis.call('HSET', K.info, unpack(fields))
  redis.call('PEXPIRE', K.info, px + c.history)
end

-- Gives the lock to contender d: for its lease when it takes it itself (claimed), for the claim
-- window when it is granted to a waiter. The minimum hold counts from the claim, and on Redlock
-- from phase 2 (merge.lua), once the quorum holds. Returns fence, slot.
local function grant(id, d, claimed, limit)
  local c = C
  local fence = next_fence()
  local linger_until = ''
  if claimed and not has(d.options, OPT.redlock) then linger_until = min_hold_until(d.min_hold) end
  local px = claimed and lease_ms(d.ttl, linger_until) or c.claim
  local slot = ''
  if d.mode == 'x' then
    note_expired()
    redis.call('SET', K.lock, d.token, 'PX', px)
    -- (An exclusive grant to the head of the queue changes, for the waiters behind, only who is
    -- the head.)
    wrote('lock', d.token, 'due')
    c.noted = false
    if not c.info_clean then redis.call('DEL', K.info) end
    wrote('info', false)
    write_info(id, d, fence, px, claimed and 1 or 0, linger_until)
    if claimed then tick_take(d) end
  else
    wrote('queue', nil, 'view')
    if d.mode == 'n' then
      wrote('slots')
      redis.call('HSET', K.sem, SEM.limit, limit)
      slot = take_slot(limit)
    end
    redis.call('ZADD', K.h, NOW + px, id)
    local fields = put_record({}, RECORD.who, 'holder', d.who, id .. '.')
    put(fields, {id .. '.' .. HOLDER.token, d.token, id .. '.' .. HOLDER.mode, d.mode,
                 id .. '.' .. HOLDER.version, VERSION, id .. '.' .. HOLDER.since, NOW,
                 id .. '.' .. HOLDER.fence, fence, id .. '.' .. HOLDER.ttl, d.ttl, id .. '.' .. HOLDER.slot, slot,
                 id .. '.' .. HOLDER.claimed, claimed and 1 or 0, id .. '.' .. HOLDER.joined, d.joined or NOW,
                 id .. '.' .. HOLDER.linger_until, linger_until})
    redis.call('HSET', K.hi, unpack(fields))
  end
  return fence, slot
end

-- A waiter's record in :w, as enqueue wrote it.
local function load_waiter(id)
  local v = hmget_of(K.w, id, with_record(RECORD.who, 'waiter', WAITER.token, WAITER.mode, WAITER.since,
                                          WAITER.ttl, WAITER.options, WAITER.watching))
  return {token = v[WAITER.token], mode = v[WAITER.mode], who = record_from(RECORD.who, 'waiter', v),
          joined = v[WAITER.since], ttl = v[WAITER.ttl], options = v[WAITER.options], watching = v[WAITER.watching]}
end

-- Grants the lock to the live waiters at the head of the queue that can have it now: one
-- exclusive waiter, or a run of shared ones, or as many semaphore waiters as there are free
-- slots. Dead waiters at the head are dropped on the way, never granted.
local function advance()
  local c = C
  reap()
  if quiet() then return end
  local limit  -- (read for a semaphore waiter only: the others' holds do not count slots)
  while true do
    local head = redis.call('ZRANGE', K.q, 0, 0)
    if #head == 0 then break end
    local id = head[1]
    local lease = redis.call('ZSCORE', K.wl, id)
    local d = nil
    if lease and tonumber(lease) > NOW then d = load_waiter(id) end
    if not d or not d.token then
      if not spend() then break end
      remove_waiter(id)  -- dead (its lease ran out), or half-written: drop it
    else
      if d.mode == 'n' and not limit then limit = semaphore_limit() end
      if not can_take(d.mode, limit) then break end
      if not spend() then break end
      remove_waiter(id, d.mode == 'x')
      grant(id, d, false, limit)
      -- It sleeps on someone else's mailbox (a waiter dropped since), or is a preemptor, which
      -- may not watch the exclusive holder (see waiting): the caller wakes it on its own mailbox,
      -- twice, as the waiter behind it watches that mailbox too and may take one push (its
      -- heartbeat, 2.5s behind others, would come after the claim window).
      if (d.watching ~= c.caller or has(d.options, OPT.preempt)) and id ~= c.caller then
        c.push[#c.push + 1] = id
        c.push[#c.push + 1] = id
      end
      -- A preemptible one granted while a preemptor waits is asked to stop at once.
      if d.mode == 'x' and has(d.options, OPT.preemptible) then preempt_next() end
      if d.mode == 'x' then break end
    end
  end
  tidy_limit()
end

-- Whether contender (token, id, mode) holds the lock, and its fence, slot and claim state.
local function held_by(token, id, mode)
  if mode == 'x' then
    if lock_value() ~= token then return false end
    local v = hmget(K.info, INFO.fence, INFO.claimed)
    return true, tonumber(v[INFO.fence] or '0'), '', v[INFO.claimed] == '1'
  end
  if quiet() then return false end
  local expiry = redis.call('ZSCORE', K.h, id)
  if not expiry or tonumber(expiry) <= NOW then return false end
  local v = hmget_of(K.hi, id, {HOLDER.token, HOLDER.fence, HOLDER.slot, HOLDER.claimed})
  if v[HOLDER.token] ~= token then return false end
  return true, tonumber(v[HOLDER.fence] or '0'), v[HOLDER.slot] or '', v[HOLDER.claimed] == '1'
end

-- The kind of hold token has ('x', or the mode of a shared or semaphore hold), or nil.
local function hold_kind(token, id)
  if lock_value() == token then return 'x' end
  if quiet() then return nil end
  local expiry = redis.call('ZSCORE', K.h, id)
  if expiry and tonumber(expiry) > NOW and redis.call('HGET', K.hi, id .. '.' .. HOLDER.token) == token then
    return redis.call('HGET', K.hi, id .. '.' .. HOLDER.mode)
  end
  return nil
end

-- Turns a grant into a hold for the contender's full lease; the history records the acquisition.
-- known: for an exclusive hold, :info's joined and fence if the caller read them already.
local function claim(id, d, known)
  local linger_until = min_hold_until(d.min_hold)
  local joined, fence
  if d.mode == 'x' then
    local v = known or hmget(K.info, INFO.joined, INFO.fence)
    local px = lease_ms(d.ttl, linger_until)
    joined, fence = v[INFO.joined], v[INFO.fence]
    redis.call('PEXPIRE', K.lock, px)
    wrote('lease')
    redis.call('HSET', K.info, INFO.claimed, 1, INFO.expires, NOW + px, INFO.linger_until, linger_until)
    redis.call('PEXPIRE', K.info, px + C.history)
    tick_take(d)
  else
    local v = hmget_of(K.hi, id, {HOLDER.joined, HOLDER.fence})
    joined, fence = v[HOLDER.joined], v[HOLDER.fence]
    redis.call('ZADD', K.h, 'XX', NOW + lease_ms(d.ttl, linger_until), id)
    changed('view')
    redis.call('HSET', K.hi, id .. '.' .. HOLDER.claimed, 1, id .. '.' .. HOLDER.linger_until, linger_until)
    -- Whoever waits behind it may be granted too (a run of shared waiters, free slots) or must
    -- now watch every holder: wake it.
    wake(K.mb)
  end
  event(EVENT.acquired, who_event(d.who, {EV.fence, fence, EV.waited, joined and tostring(NOW - tonumber(joined)) or '',
                                          EV.id, id, EV.tick, d.tick or false, EV.period, d.period or false}))
end

-- Tells the superseded waiter id to leave (it reads the notice at its next step; the caller
-- pushes its mailbox so that this is at once).
local function supersede(id, by)
  local c = C
  wrote('queue')
  local d = load_waiter(id)
  remove_waiter(id)
  redis.call('HSET', K.w, id .. '.' .. WAITER.superseded_by, by)
  redis.call('ZADD', K.gone, NOW + 4 * c.lease, id)
  event(EVENT.superseded, who_event(d.who, {EV.waited, d.joined and tostring(NOW - tonumber(d.joined)) or '',
                                            EV.by, by, EV.id, id}))
  c.push[#c.push + 1] = id
end

-- A place in the queue: in arrival order, or with preempt at the front (behind earlier
-- preemptors, whose scores are below 0). A superseding waiter replaces the older superseding ones.
-- A plain one, at the end, changes for the others only the length of the queue (see changed).
-- at: the score of a waiter that joins again in its old order (see rejoin_at), else nil; it
-- replaces only the superseding ones that arrived before it.
local function enqueue(id, d, preempt, at)
  local c = C
  local supersedes = has(d.options, OPT.supersede)
  wrote('queue', nil, (preempt or supersedes or at) and 'view' or 'due')
  -- (at: in its place among the others, whose scores it does not repeat: one of its old master.)
  local score
  if at then
    score = at
  elseif preempt then
    local last = redis.call('ZREVRANGEBYSCORE', K.q, '(0', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    score = tonumber(c.now_us) - 4e15
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  else
    local last = redis.call('ZRANGE', K.q, -1, -1, 'WITHSCORES')
    score = tonumber(c.now_us)
    if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  end
  if supersedes then
    for _, old in ipairs(redis.call('ZRANGEBYSCORE', K.sq, '-inf', at and '(' .. string.format('%.0f', at) or '+inf',
                                    'LIMIT', 0, BUDGET)) do
      if not spend() then break end
      supersede(old, who_text(d.who))
    end
    redis.call('ZADD', K.sq, score, id)
  end
  redis.call('ZADD', K.q, score, id)
  c.joined = score
  if at then
    -- Ahead of waiters already queued: the one now just behind it still watches the mailbox of
    -- the one before it (or the holder's), whose push at the hand-off it may take instead of this
    -- waiter (see advance). It is woken to step and watch this one (twice: the one behind it
    -- watches its mailbox too).
    local next_rank = redis.call('ZRANK', K.q, id) + 1
    local behind = redis.call('ZRANGE', K.q, next_rank, next_rank)[1]
    if behind then
      c.push[#c.push + 1] = behind
      c.push[#c.push + 1] = behind
    end
  end
  redis.call('ZADD', K.wl, NOW + c.lease, id)
  local prefix = id .. '.'
  local fields = put_record({}, RECORD.who, 'waiter', d.who, prefix)
  put(fields, {prefix .. WAITER.token, d.token, prefix .. WAITER.mode, d.mode, prefix .. WAITER.version, VERSION,
               prefix .. WAITER.since, NOW, prefix .. WAITER.ttl, d.ttl, prefix .. WAITER.options, d.options or ''})
  redis.call('HSET', K.w, unpack(fields))
end

-- Where a waiter joins the queue again when its place is gone (a failover, or a restart, lost it)
-- while it kept it alive: at the arrival it had (the queue's score, us, as its old place's
-- waiting reply gave it; on the old master's clock), so that the waiters that move keep their
-- order, and stay ahead of those that came after them. Bounded: never later than now (an arrival
-- ahead of this server's clock would put it behind requests that came after it), and never
-- earlier than the moment it started waiting by this server's clock, give or take a second: now
-- less waited (ms, by the waiter's own clock since its request began) less 1s. So no waiter goes
-- ahead of a request that reached the server more than a second before it started waiting. nil
-- without an arrival (a waiter whose place may have lapsed for its own reasons joins at the end).
local function rejoin_at(arrival, waited, preempt)
  local at, w = tonumber(arrival or ''), tonumber(waited or '')
  if not at or not w then return nil end
  local now = tonumber(C.now_us) - (preempt and 4e15 or 0)
  local earliest = now - (w + 1000) * 1000
  if at > now then at = now end
  if at < earliest then at = earliest end
  return at
end

-- The first preemptor in the queue, or nil.
local function first_preemptor()
  return redis.call('ZRANGEBYSCORE', K.q, '-inf', '(0', 'LIMIT', 0, 1)[1]
end

-- ---- What waiters see.

-- The holder as the others see it: host, pid, cmd, since, lingering (0/1), ms until its lease
-- (or the earliest of the shared ones) ends, or -1.
--
-- view: what check_types read (current_view), when nothing the holder's view shows has been
-- written since.
local function holder_view(view)
  local value = lock_value()
  if value and view and view.value == value then
    local v = view.info
    return view.who.host, view.who.pid, view.who.cmd, v[INFO.since] or '', v[INFO.lingering] == '1' and 1 or 0,
           view.pttl
  end
  if value then
    local v = hmget(K.info, INFO.host, INFO.pid, INFO.cmd, INFO.since, INFO.lingering)
    return v[INFO.host] or '', v[INFO.pid] or '', v[INFO.cmd] or '', v[INFO.since] or '',
           v[INFO.lingering] == '1' and 1 or 0, redis.call('PTTL', K.lock)
  end
  local first = redis.call('ZRANGE', K.h, 0, 0, 'WITHSCORES')
  if first[1] then
    local id = first[1]
    local v = hmget_of(K.hi, id, {HOLDER.host, HOLDER.pid, HOLDER.cmd, HOLDER.since, HOLDER.lingering})
    return v[HOLDER.host] or '', v[HOLDER.pid] or '', v[HOLDER.cmd] or '', v[HOLDER.since] or '',
           v[HOLDER.lingering] == '1' and 1 or 0,
           math.max(0, math.floor(tonumber(first[2]) - NOW))
  end
  return '', '', '', '', 0, -1
end

-- The epoch the caller's view belongs to, as this full step leaves it (see epoch_due): a new one
-- after a change of the view, else the one K.ep has (with the head named after a hand-off, unless
-- it is the caller, whose full step this is).
local function view_epoch()
  local c = C
  local how = c.change
  c.change = nil
  local epoch, head = nil, nil
  if how ~= 'view' then epoch, head = current_epoch() end
  if not epoch then epoch, head = c.now_us, nil end
  if how == 'due' then head = redis.call('ZRANGE', K.q, 0, 0)[1] end
  if head == c.caller then head = nil end
  set_epoch(epoch, epoch_due(), head)
  return epoch
end

-- What a waiter needs to go on waiting: {3, more, push, position, queue length, since (server
-- ms), now, holder host, pid, cmd, holder since, lingering, ms left of the holder's lease (-1:
-- none; the head waits no longer than that), the epoch (view_epoch), then the ids whose mailboxes
-- to watch}. The watched id is recorded, so that a grant after it was dropped pushes the waiter's
-- own mailbox. A preemptor does not watch a --preemptible exclusive holder that has not yet seen
-- its request, as its steps push that mailbox: its grant pushes its own.
local function waiting(id)
  local rank = redis.call('ZRANK', K.q, id)
  local watch = {}
  local view = current_view()
  local host, pid, cmd, since, lingering, left = holder_view(view)
  if rank > 0 then
    watch[1] = redis.call('ZRANGE', K.q, rank - 1, rank - 1)[1]
    left = -1
  else
    local holder = lock_value() and ((view and view.info[INFO.id]) or redis.call('HGET', K.info, INFO.id))
    if holder and has(redis.call('HGET', K.w, id .. '.' .. WAITER.options), OPT.preempt) then
      local asked = hmget(K.info, INFO.preemptible, INFO.preempt_seen)
      if asked[INFO.preemptible] == '1' and asked[INFO.preempt_seen] ~= '1' then holder = nil end
    end
    if holder then watch[#watch + 1] = holder end
    for _, h in ipairs(redis.call('ZRANGE', K.h, 0, 63)) do watch[#watch + 1] = h end
  end
  redis.call('HSET', K.w, id .. '.' .. WAITER.watching, watch[1] or '')
  local epoch = view_epoch()
  local out = reply(CODE.waiting)
  local at = AT.waiting
  out[at.position], out[at.queued] = rank + 1, redis.call('ZCARD', K.q)
  out[at.since], out[at.now] = redis.call('HGET', K.w, id .. '.' .. WAITER.since) or '', NOW
  out[at.host], out[at.pid], out[at.cmd], out[at.held_since] = host, pid, cmd, since
  out[at.lingering], out[at.left] = lingering, left
  out[at.epoch] = epoch
  out[at.arrival] = C.joined and string.format('%.0f', C.joined) or ''
  for i, x in ipairs(watch) do out[at.watch + i - 1] = x end
  return out
end

-- ---- The contender of acquire and wait.

-- The contender its arguments describe (a: A.acquire or A.wait; protocol.txt: call acquire, call
-- wait): its tick is "PERIOD AGE" in ms, AGE how long ago it fired on its own clock (negative in
-- tests), and d.tick the server's time it fired then (see ticks_after).
local function contender(a)
  local d = {token = arg(a.token), ttl = arg(a.ttl), who = record_args(RECORD.who, a.who), mode = arg(a.mode),
             options = arg(a.options), min_hold = arg(a.min_hold)}
  local period, age = string.match(arg(a.tick) or '', '^(%d+) (%-?%d+)$')
  if period and tonumber(period) > 0 then d.period, d.tick = tonumber(period), NOW - tonumber(age) end
  return d, tonumber(arg(a.limit))
end

-- What acquire and wait start with: the contender, its id and limit, once the lock's keys hold
-- rlock's data and its kind of hold fits; else the error to return.
local function prologue(a)
  local d, limit = contender(a)
  local bad = check_types(d.token)
  if bad then return nil, nil, nil, bad end
  C.caller = id_of(d.token)
  bad = check_mode(d.mode, limit)
  return d, C.caller, limit, bad
end

-- ---- --preempt.

-- Asks the exclusive holder to stop for the waiting preemptor id (d), if it gave --preemptible: the
-- request (pb, who; pi, its id, in :info) names the first preemptor that asked and still waits.
-- Until the holder has seen it (ps, set by its renewal), each call pushes the holder's mailbox
-- again: a waiter that watched that mailbox may have taken the push. A lingering hold ends at
-- once. Returns whether the holder was asked (or is gone).
local function preempt(d, id)
  local v = hmget(K.info, INFO.id, INFO.preemptible, INFO.preempt_by, INFO.lingering, INFO.preemptor,
                  INFO.preempt_seen)
  if not lock_value() or v[INFO.preemptible] ~= '1' then return false end
  if v[INFO.lingering] == '1' then
    redis.call('DEL', K.lock, K.info)
    wrote('lock', false, 'view')
    return true
  end
  if v[INFO.preempt_seen] == '1' then return true end
  local asker = v[INFO.preemptor]
  if asker and asker ~= id and still_waiting(asker) then return true end
  redis.call('HSET', K.info, INFO.preempt_by, who_text(d.who), INFO.preemptor, id)
  changed('view')
  C.push[#C.push + 1] = v[INFO.id]
  return true
end

preempt_next = function()
  local first = first_preemptor()
  if first and still_waiting(first) then preempt(load_waiter(first), first) end
end

-- This call's state. (The function library leaves this line out: each of its functions calls
-- begin with its own KEYS and ARGV.)
begin(KEYS, ARGV)
