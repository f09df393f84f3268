-- Keep one event in its correlation's inbox (V6).
-- KEYS[1] inbox list, KEYS[2] taken hash
-- ARGV[1] event JSON, ARGV[2] max entries kept, ARGV[3] ttl ms
-- The list keeps the newest ARGV[2] events; TTLs only ever extend (a busy correlation's
-- inbox never expires under a wait that is about to read it).
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
local ttl = tonumber(ARGV[3])
for _, key in ipairs(KEYS) do
  local left = redis.call('PTTL', key)
  if left ~= -2 and (left == -1 or left < ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
end
return redis.call('LLEN', KEYS[1])
