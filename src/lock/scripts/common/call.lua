-- The code every lock script shares, in the files of src/lock/scripts/common/ (in the order
-- src/CMakeLists.txt lists them: RLOCK_COMMON), which the build puts after the protocol's prelude
-- and in front of each script. This one: the keys, the call's context and its records.
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
-- call's, so that nothing of one call is seen by the next. K, NOW and G are three of its fields
-- under short names, set with it:
--   K            the call's keys by their Lua name (K.lock, K.info...), each looked up on first use
--   NOW          the server's clock (ms); now_us: in us, as a string; now_arg: NOW as a string
--   G            (cfg) the configuration (CFG): lease claim mailbox history log_length (numbers),
--                keep log_length_arg (as given), summary (a number given to redis.call is
--                formatted at each call, which costs more than the command it is for: the strings
--                are kept as given)
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
local C, K, NOW, G

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
  -- (What it knows starts as nil, which reads as false: only the fields with a value are set
  -- here, the others when the call learns them. The keys every common call uses are put in K at
  -- once, the others looked up on first use.)
  -- (Two small tables, the configuration apart: a table of more than 16 fields takes twice the
  -- room, and this one is made at every call.)
  C = {keys = keys, args = argv,
       k = setmetatable({lock = keys[KEY.lock], info = keys[KEY.info], log = keys[KEY.log], sum = keys[KEY.sum]},
                        KEYS_BY_NAME),
       cfg = {lease = tonumber(argv[CFG.lease]), claim = tonumber(argv[CFG.claim]), mailbox = argv[CFG.mailbox],
              history = tonumber(argv[CFG.history]), keep = argv[CFG.keep],
              log_length = tonumber(argv[CFG.log_length]), log_length_arg = argv[CFG.log_length],
              summary = argv[CFG.summary] ~= '0'},
       now = tonumber(now_arg), now_us = now_us, now_arg = now_arg, work = 0, push = {}, caller = ''}
  K, NOW, G = C.k, C.now, C.cfg
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

-- A record read from a call's arguments, from index at on (by the record's constructor: see the
-- prelude's RECORD).
local function record_args(record, at)
  return record.args(C.args, at)
end

-- A record read from values by field (hmget's), as the place (RECORD.NAME.KIND) names them.
local function record_from(record, place, values)
  return record.from[place](values)
end

-- (The loops below go over a record's fields by index, as far as the record's list of them:
-- ipairs calls a function for each element, which costs more than the work it does here.)

-- Appends record r's fields, as the place names them (after prefix: "<id>." in :w and :hi), and
-- their values to the field list out; returns out.
local function put_record(out, record, place, r, prefix)
  local fields, names, n = record[place], record.names, #out
  for i = 1, #names do
    out[n + 1] = prefix and prefix .. fields[i] or fields[i]
    out[n + 2] = r[names[i]] or ''
    n = n + 2
  end
  return out
end

-- Appends the field/value pairs of list to out; returns out.
local function put(out, list)
  local n = #out
  for i = 1, #list do out[n + i] = list[i] end
  return out
end

-- Who a contender is, for notices: its who's fields joined by tabs ("host\tpid\tuser\tcmd").
local function who_text(who)
  local out, names = {}, RECORD.who.names
  for i = 1, #names do out[i] = who[names[i]] or '' end
  return table.concat(out, '\t')
end

-- "<id>.FIELD" of each field of names.
local function fields_of(id, names)
  local out, prefix = {}, id .. '.'
  for i = 1, #names do out[i] = prefix .. names[i] end
  return out
end

-- HMGET of the fields names (a list) of hash key, as a table keyed by field (false: missing).
local function hmget_list(key, names)
  local v = redis.call('HMGET', key, unpack(names))
  local out = {}
  for i = 1, #names do out[names[i]] = v[i] end
  return out
end

-- The same, for the fields given.
local function hmget(key, ...)
  return hmget_list(key, {...})
end

-- The same for the fields of id in a hash of "<id>.FIELD" (:w, :hi), keyed by FIELD.
local function hmget_of(key, id, names)
  local v = redis.call('HMGET', key, unpack(fields_of(id, names)))
  local out = {}
  for i = 1, #names do out[names[i]] = v[i] end
  return out
end

-- The field names a place keeps of a record, then the others given (for one HMGET).
local function with_record(record, place, ...)
  return record.fields[place](...)
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
