-- Shared by every lock script (see call.lua): the holder as the call read it, what waiters see
-- changed, and the replies.

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
  local v = hmget_list(K.info, with_record(RECORD.who, 'info', INFO.id, INFO.since, INFO.lingering,
                                           INFO.history))
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
             math.max(due - NOW, 0) + G.lease + G.claim)
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
