-- Shared by every lock script (CMake puts it in front of each one).
--
-- The keys of one lock, all under its hash tag and all declared by the caller:
--   KEYS[1]  PREFIX{KEY}          the exclusive holder's token (PX = its lease)
--   KEYS[2]  ...:fence            fencing counter, never expires
--   KEYS[3]  ...:info             the exclusive holder: id host pid user cmd since fence ttl claimed
--   KEYS[4]  ...:q                the queue: ZSET id -> arrival (server microseconds, made unique)
--   KEYS[5]  ...:w                the waiters: HASH "<id>.<field>" (t m h p u c s ttl)
--   KEYS[6]  ...:wl               the waiters' leases: ZSET id -> expiry (server ms)
--   KEYS[7]  ...:h                shared and semaphore holders: ZSET id -> lease expiry (server ms)
--   KEYS[8]  ...:hi               their data: HASH "<id>.<field>" (t m h p u c s f ttl slot k)
--   KEYS[9]  ...:limit            the semaphore's N while it has holders or waiters
--   KEYS[10] ...:slots            semaphore slots: HASH slot -> holder id
--   KEYS[11] ...:mb:<id>          the caller's mailbox: pushed when its hold or its place ends
-- A contender's id is the first 16 characters of its token (the rest, 128 bits, is the secret).
--
-- Waiting: each waiter blocks (BLPOP, outside Lua) on the mailbox of the one just before it in
-- the queue, or at the head, of the holders; whoever leaves pushes its own mailbox. The next
-- live waiter is granted the lock in the script that frees it (a claim window of CLAIM_MS); it
-- claims the grant in its next wait step. A waiter whose lease in the queue (LEASE_MS, renewed
-- by its heartbeat) ran out is dead and leaves the queue when next seen; a grant not claimed in
-- time expires and goes to the next one.

local LEASE_MS = 3000  -- a waiter that missed its heartbeats this long is gone
local CLAIM_MS = 2000  -- a grant not claimed this long goes to the next waiter
local MAILBOX_MS = 10000
local REAP = 16        -- dead entries removed per call (amortised)

local K_LOCK, K_FENCE, K_INFO, K_Q, K_W, K_WL, K_H, K_HI, K_LIMIT, K_SLOTS, K_MB = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11

local WAITER_FIELDS = {'t', 'm', 'h', 'p', 'u', 'c', 's', 'ttl'}
local HOLDER_FIELDS = {'t', 'm', 'h', 'p', 'u', 'c', 's', 'f', 'ttl', 'slot', 'k', 'kp', 'kw'}

local t = redis.call('TIME')
local NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local NOW_US = t[1] .. string.format('%06d', tonumber(t[2]))

local function id_of(token)
  return string.sub(token, 1, 16)
end

local function fields(id, names)
  local out = {}
  for i, f in ipairs(names) do out[i] = id .. '.' .. f end
  return out
end

local function check_types()
  local kind = redis.call('TYPE', KEYS[K_LOCK])['ok']
  if kind ~= 'none' and kind ~= 'string' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[K_LOCK] .. ' holds a ' .. kind .. ', not an rlock lock')
  end
  return nil
end

-- The next fencing token. A missing counter starts from the server's clock in microseconds: above
-- every value it can have handed out before a restart that lost it.
local function next_fence()
  redis.call('SET', KEYS[K_FENCE], NOW_US, 'NX')
  local fence = redis.pcall('INCR', KEYS[K_FENCE])
  -- Another program's data (a hash, a word): say which of the lock's keys it is.
  if type(fence) == 'table' and fence.err then error(redis.error_reply('RLOCKFOREIGN fence')) end
  return fence
end

local function wake(mailbox)
  redis.call('LPUSH', mailbox, '1')
  redis.call('LTRIM', mailbox, 0, 0)
  redis.call('PEXPIRE', mailbox, MAILBOX_MS)
end

local function remove_waiter(id)
  redis.call('ZREM', KEYS[K_Q], id)
  redis.call('ZREM', KEYS[K_WL], id)
  redis.call('HDEL', KEYS[K_W], unpack(fields(id, WAITER_FIELDS)))
end

local function remove_holder(id)
  redis.call('ZREM', KEYS[K_H], id)
  local slot = redis.call('HGET', KEYS[K_HI], id .. '.slot')
  if slot and slot ~= '' then redis.call('HDEL', KEYS[K_SLOTS], slot) end
  redis.call('HDEL', KEYS[K_HI], unpack(fields(id, HOLDER_FIELDS)))
end

local function reap()
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[K_WL], '-inf', NOW, 'LIMIT', 0, REAP)) do
    remove_waiter(id)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[K_H], '-inf', NOW, 'LIMIT', 0, REAP)) do
    remove_holder(id)
  end
end

-- The semaphore's N stays only while someone holds or waits.
local function tidy_limit()
  if redis.call('ZCARD', KEYS[K_H]) == 0 and redis.call('ZCARD', KEYS[K_Q]) == 0 then
    redis.call('DEL', KEYS[K_LIMIT])
  end
end

-- Refuses a contender whose kind of hold (x exclusive, s shared, n a semaphore of limit) does not
-- fit the lock as others use it.
local function check_mode(mode, limit)
  -- Dead holders and waiters first: a semaphore whose holders all died is no semaphore any more.
  reap()
  tidy_limit()
  local stored = redis.call('GET', KEYS[K_LIMIT])
  if mode == 'n' then
    if stored and tonumber(stored) ~= limit then
      return redis.error_reply('RLOCKLIMIT ' .. stored .. ' ' .. limit)
    end
    if not stored and (redis.call('GET', KEYS[K_LOCK]) or redis.call('ZCARD', KEYS[K_H]) > 0 or
                       redis.call('ZCARD', KEYS[K_Q]) > 0) then
      return redis.error_reply('RLOCKLIMIT 1 ' .. limit)
    end
  elseif stored then
    return redis.error_reply('RLOCKLIMIT ' .. stored .. ' 1')
  end
  return nil
end

-- Whether a contender of this kind could hold the lock now (the queue aside).
local function can_take(mode, limit)
  if mode == 'n' then return redis.call('ZCARD', KEYS[K_H]) < limit end
  if redis.call('GET', KEYS[K_LOCK]) then return false end
  return mode == 's' or redis.call('ZCARD', KEYS[K_H]) == 0
end

local function free_slot(limit)
  for slot = 1, limit do
    if redis.call('HEXISTS', KEYS[K_SLOTS], slot) == 0 then return slot end
  end
  return ''
end

-- Gives the lock to contender d (t m h p u c ttl): for its TTL when it takes it itself (claimed),
-- for the claim window when it is granted to a waiter. Returns fence, slot.
local function grant(id, d, claimed, limit)
  local fence = next_fence()
  local px = claimed and tonumber(d.ttl) or CLAIM_MS
  local slot = ''
  if d.m == 'x' then
    redis.call('SET', KEYS[K_LOCK], d.t, 'PX', px)
    redis.call('DEL', KEYS[K_INFO])
    redis.call('HSET', KEYS[K_INFO], 'id', id, 'host', d.h, 'pid', d.p, 'user', d.u, 'cmd', d.c, 'since', NOW,
               'fence', fence, 'ttl', d.ttl, 'claimed', claimed and 1 or 0)
    redis.call('PEXPIRE', KEYS[K_INFO], px)
  else
    if d.m == 'n' then
      slot = free_slot(limit)
      redis.call('HSET', KEYS[K_SLOTS], slot, id)
      redis.call('SET', KEYS[K_LIMIT], limit)
    end
    redis.call('ZADD', KEYS[K_H], NOW + px, id)
    redis.call('HSET', KEYS[K_HI], id .. '.t', d.t, id .. '.m', d.m, id .. '.h', d.h, id .. '.p', d.p,
               id .. '.u', d.u, id .. '.c', d.c, id .. '.s', NOW, id .. '.f', fence, id .. '.ttl', d.ttl,
               id .. '.slot', slot, id .. '.k', claimed and 1 or 0)
  end
  return fence, slot
end

local function load_waiter(id)
  local v = redis.call('HMGET', KEYS[K_W], unpack(fields(id, WAITER_FIELDS)))
  return {t = v[1], m = v[2], h = v[3], p = v[4], u = v[5], c = v[6], s = v[7], ttl = v[8]}
end

-- Grants the lock to the waiters at the head of the queue that can have it now: one exclusive
-- waiter, or a run of shared ones, or as many semaphore waiters as there are free slots.
local function advance()
  reap()
  local limit = tonumber(redis.call('GET', KEYS[K_LIMIT]) or '1')
  while true do
    local head = redis.call('ZRANGE', KEYS[K_Q], 0, 0)
    if #head == 0 then break end
    local id = head[1]
    local d = load_waiter(id)
    if not d.t then
      remove_waiter(id)  -- half-written entry: drop it
    else
      if not can_take(d.m, limit) then break end
      remove_waiter(id)
      grant(id, d, false, limit)
      if d.m == 'x' then break end
    end
  end
  tidy_limit()
end

-- Whether contender (token, id, mode) holds the lock, and its fence, slot and claim state.
local function held_by(token, id, mode)
  if mode == 'x' then
    if redis.call('GET', KEYS[K_LOCK]) ~= token then return false end
    local v = redis.call('HMGET', KEYS[K_INFO], 'fence', 'claimed')
    return true, tonumber(v[1] or '0'), '', v[2] == '1'
  end
  if not redis.call('ZSCORE', KEYS[K_H], id) then return false end
  local v = redis.call('HMGET', KEYS[K_HI], id .. '.t', id .. '.f', id .. '.slot', id .. '.k')
  if v[1] ~= token then return false end
  return true, tonumber(v[2] or '0'), v[3] or '', v[4] == '1'
end

-- The kind of hold token has ('x', or the mode of a shared or semaphore hold), or nil.
local function hold_kind(token, id)
  if redis.call('GET', KEYS[K_LOCK]) == token then return 'x' end
  if redis.call('ZSCORE', KEYS[K_H], id) and redis.call('HGET', KEYS[K_HI], id .. '.t') == token then
    return redis.call('HGET', KEYS[K_HI], id .. '.m')
  end
  return nil
end

-- Turns a grant into a hold for the contender's full TTL.
local function claim(id, mode, ttl)
  if mode == 'x' then
    redis.call('PEXPIRE', KEYS[K_LOCK], ttl)
    redis.call('HSET', KEYS[K_INFO], 'claimed', 1)
    redis.call('PEXPIRE', KEYS[K_INFO], ttl)
  else
    redis.call('ZADD', KEYS[K_H], 'XX', NOW + tonumber(ttl), id)
    redis.call('HSET', KEYS[K_HI], id .. '.k', 1)
    -- Whoever waits behind it may be granted too (a run of shared waiters, free slots) or must
    -- now watch every holder: wake it.
    wake(KEYS[K_MB])
  end
end

local function enqueue(id, d)
  local last = redis.call('ZRANGE', KEYS[K_Q], -1, -1, 'WITHSCORES')
  local score = tonumber(NOW_US)
  if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[K_Q], score, id)
  redis.call('ZADD', KEYS[K_WL], NOW + LEASE_MS, id)
  redis.call('HSET', KEYS[K_W], id .. '.t', d.t, id .. '.m', d.m, id .. '.h', d.h, id .. '.p', d.p, id .. '.u', d.u,
             id .. '.c', d.c, id .. '.s', NOW, id .. '.ttl', d.ttl)
end

-- What a waiter needs to go on waiting: {3, position, queue length, since (server ms), now,
-- holder host, pid, cmd, holder since, then the ids whose mailboxes to watch}.
local function waiting(id)
  local rank = redis.call('ZRANK', KEYS[K_Q], id)
  local out = {3, rank + 1, redis.call('ZCARD', KEYS[K_Q]), redis.call('HGET', KEYS[K_W], id .. '.s') or '', NOW}
  local info = redis.call('HMGET', KEYS[K_INFO], 'id', 'host', 'pid', 'cmd', 'since')
  local first = redis.call('ZRANGE', KEYS[K_H], 0, 0)
  local watch = {}
  if rank > 0 then
    watch[1] = redis.call('ZRANGE', KEYS[K_Q], rank - 1, rank - 1)[1]
  else
    if info[1] then watch[#watch + 1] = info[1] end
    for _, h in ipairs(redis.call('ZRANGE', KEYS[K_H], 0, 63)) do watch[#watch + 1] = h end
  end
  if info[2] then
    out[6], out[7], out[8], out[9] = info[2], info[3], info[4], info[5]
  elseif first[1] then
    local v = redis.call('HMGET', KEYS[K_HI], first[1] .. '.h', first[1] .. '.p', first[1] .. '.c', first[1] .. '.s')
    out[6], out[7], out[8], out[9] = v[1] or '', v[2] or '', v[3] or '', v[4] or ''
  else
    out[6], out[7], out[8], out[9] = '', '', '', ''
  end
  for _, w in ipairs(watch) do out[#out + 1] = w end
  return out
end

-- The contender described by ARGV[1..8]: token ttl host pid user cmd mode limit.
local function contender()
  return {t = ARGV[1], ttl = ARGV[2], h = ARGV[3], p = ARGV[4], u = ARGV[5], c = ARGV[6], m = ARGV[7]},
         tonumber(ARGV[8])
end

-- What acquire and wait start with: the contender, its id and limit, once the lock's keys hold
-- rlock's data and its kind of hold fits; else the error to return.
local function prologue()
  local bad = check_types()
  if bad then return nil, nil, nil, bad end
  local d, limit = contender()
  bad = check_mode(d.m, limit)
  return d, id_of(d.t), limit, bad
end
