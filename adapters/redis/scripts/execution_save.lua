-- Fenced save (W4): write the state only under the current lease generation.
-- KEYS[1] fencegen   KEYS[2] state
-- ARGV[1] fence the writer holds   ARGV[2] state JSON
-- Returns the current generation (nil if never acquired); the state was written only if it
-- equals ARGV[1].
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
end
return current
