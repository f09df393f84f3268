-- Swap a rate bucket's value if it still holds what the taker read (W23). The rule is the
-- domain's (plaita.domain.rate_limits.decide_take); this only compares and sets.
-- KEYS[1] the bucket (a string: "<TAT µs>:<waiters' tail µs>", µs since the epoch)
-- ARGV[1] the value read ("" = no bucket)   ARGV[2] the new value   ARGV[3] TTL in ms
-- Returns {1} when set, {0, current value or ""} when another taker moved it first.
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then
  return {0, current}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1}
