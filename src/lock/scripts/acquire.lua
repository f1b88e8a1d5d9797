-- Takes a lock in one atomic step.
-- KEYS: lock, fence, info. ARGV: token, ttl_ms, host, pid, user, command, tokens of enclosing holds...
-- Returns {1, fence} when taken, {2, fence, pttl, i} when the enclosing hold whose token is ARGV[6 + i]
-- owns it (re-entry), {0, pttl, host, pid, command, since_ms, now_ms} when another holder has it.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind .. ', not an rlock lock')
end
local t = redis.call('TIME')
local now = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
if kind == 'none' then
  -- A missing counter (first use, or lost with a restart without persistence) starts from the
  -- server's clock in microseconds: above every value it can have handed out before, as long as
  -- fewer than a million locks a second were taken and the clock did not step back.
  redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), 'NX')
  -- INCR first: if the fence key holds something else it fails before anything is written.
  local fence = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'host', ARGV[3], 'pid', ARGV[4], 'user', ARGV[5], 'cmd', ARGV[6],
             'since', now, 'fence', fence, 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return {1, fence}
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  -- Our own token: an earlier attempt whose answer was lost (a retry after a failover) took it.
  return {1, tonumber(redis.call('HGET', KEYS[3], 'fence') or '0')}
end
for i = 7, #ARGV do
  if holder == ARGV[i] then
    return {2, tonumber(redis.call('HGET', KEYS[3], 'fence') or '0'), redis.call('PTTL', KEYS[1]), i - 6}
  end
end
local info = redis.call('HMGET', KEYS[3], 'host', 'pid', 'cmd', 'since')
return {0, redis.call('PTTL', KEYS[1]), info[1], info[2], info[3], info[4], now}
