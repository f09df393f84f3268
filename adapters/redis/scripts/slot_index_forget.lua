-- Unlist an idle slot table, unless it was written since the sweeper listed it.
-- KEYS[1] the listing (sorted set: member -> when the table was last written, ms)
-- ARGV[1] the member, ARGV[2] its score when listed
-- Returns 1 when removed, 0 when written since (or already gone).
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
