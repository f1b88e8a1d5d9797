-- The light heartbeat of a waiter behind others that nothing woke: it renews the waiter's lease
-- in the queue while the view the waiter kept still holds, and nothing else. A script of its
-- own, without the protocol's prelude and the shared code (src/CMakeLists.txt, RLOCK_LIGHT_SCRIPTS): no
-- configuration to parse, no call state, two keys; four commands (GET, TIME, PTTL, ZADD).
-- KEYS: the waiters' leases (:wl), the lock's epoch (:ep). ARGV: protocol.txt, light beat: the
-- waiter's id, the epoch of its last view (see view_epoch in common/waiting.lua), the lease to give it
-- (ms), the claim window (ms).
-- Returns the code alone (no header: a table costs the server more than the rest of the step):
-- unchanged when the view holds and the lease was renewed; else stale: the epoch changed (or is
-- gone), something time-based may be due, the epoch names this waiter as the one whose next step
-- must be a full one (the head of the queue, after a hand-off), the queue's keys would not outlive
-- the new lease by the claim window, or the waiter has no place any more (or stepped twice in one
-- ms), and the caller takes the full step (wait.lua).
--
-- The view holds while the epoch is the same and the server's clock is before its due time (no
-- lease can have run out). The queue's keys expire together, a lease and the claim window after
-- the last lease, as of the last full step (set_expiries): a lease that would outlive that is
-- the full step's to give, which sets their expiries again.
local v = redis.pcall('GET', KEYS[2])
if type(v) ~= 'string' then return @reply_stale_code@ end
local epoch, due, head = string.match(v, '^(%d+) (%d+) ?(%x*)$')
local id = ARGV[@arg_beat_id@]
if epoch ~= ARGV[@arg_beat_epoch@] or head == id then return @reply_stale_code@ end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(due) then return @reply_stale_code@ end
local lease = tonumber(ARGV[@arg_beat_lease@])
local left = redis.call('PTTL', KEYS[1])
if left ~= -1 and left < lease + tonumber(ARGV[@arg_beat_claim@]) then return @reply_stale_code@ end
if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + lease, id) == 0 then return @reply_stale_code@ end
return @reply_unchanged_code@
