-- Mark a start dedup claim's carrier as enqueued, only while the claim names this execution.
-- KEYS[1] dedup key   KEYS[2] its "carrier enqueued" mark (same hash tag)
-- ARGV[1] execution id
-- Returns 1 when marked (the mark expires with the claim), 0 when the key names another.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('SET', KEYS[2], '1', 'PX', ttl)
else
  redis.call('SET', KEYS[2], '1')
end
return 1
