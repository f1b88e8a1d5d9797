-- The light heartbeat of a waiter behind others that nothing woke: it renews the waiter's lease
-- in the queue while the view the waiter kept still holds, and nothing else. A script of its
-- own, without common.lua (src/CMakeLists.txt, RLOCK_LIGHT_SCRIPTS): no configuration to parse,
-- no call state, two keys; three commands (GET, TIME, ZADD).
-- KEYS: the waiters' leases (:wl), the lock's epoch (:ep). ARGV: the waiter's id, the epoch of
-- its last view (see view_epoch in common.lua), the lease to give it (ms), the claim window (ms).
-- Returns the code alone (no header: a table costs the server more than the rest of the step):
-- unchanged when the view holds and the lease was renewed; else stale: the epoch changed (or is
-- gone, or was written by an earlier version), something time-based may be due, the queue's keys
-- would not outlive the new lease by the claim window, or the waiter has no place any more (or
-- stepped twice in one ms), and the caller takes the full step (wait.lua).
--
-- The view holds while the epoch is the same and the server's clock is before its due time (no
-- lease can have run out). The queue's keys expire together, a lease and the claim window after
-- the last lease, as of the last full step (set_expiries), which wrote that time into the epoch's
-- value: while the epoch stands they expire no earlier (view_epoch). A lease that would outlive that
-- is the full step's to give, which sets their expiries again.
local v = redis.pcall('GET', KEYS[2])
if type(v) ~= 'string' then return @reply_stale_code@ end
local epoch, due, keys_end = string.match(v, '^(%d+) (%d+) (%d+)$')
if epoch ~= ARGV[2] then return @reply_stale_code@ end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(due) then return @reply_stale_code@ end
local lease_end = now + tonumber(ARGV[3])
if lease_end + tonumber(ARGV[4]) > tonumber(keys_end) then return @reply_stale_code@ end
if redis.call('ZADD', KEYS[1], 'XX', 'CH', lease_end, ARGV[1]) == 0 then return @reply_stale_code@ end
return @reply_unchanged_code@
