-- Carries on the work a script left for lack of budget: drops dead entries and grants the lock to
-- the live waiters at the head of the queue.
-- KEYS: the lock's keys. ARGV: cfg. Returns {1, more, push}.
local bad = check_types()
if bad then return bad end
advance()
set_expiries()
return reply(CODE.done)
