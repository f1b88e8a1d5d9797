-- Carries on the work a script left for lack of budget: drops dead entries and grants the lock to
-- the live waiters at the head of the queue.
-- KEYS: the lock's keys. ARGV: protocol.txt, call advance: the configuration alone.
-- Returns {1, more, push}.
local bad = check_types()
if bad then return refuse(bad) end
advance()
set_expiries()
return reply(CODE.done)
