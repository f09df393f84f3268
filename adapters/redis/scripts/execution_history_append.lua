-- Append history entries without a fence (what has no checkpoint to ride on: a worker that
-- lost its lease), only while the execution's state exists and it was not deleted, so it
-- never brings an execution back. The entries share the state's remaining lifetime.
-- KEYS[1] state   KEYS[2] tombstone   KEYS[3] history   KEYS[4] history total
-- ARGV[1] history cap   ARGV[2...] the entries (stored form)
-- Returns 1 when appended, 0 when there was nothing to append to.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local unpack = unpack or table.unpack
for first = 2, #ARGV, 256 do
  redis.call('RPUSH', KEYS[3], unpack(ARGV, first, math.min(first + 255, #ARGV)))
end
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[1]), -1)
redis.call('INCRBY', KEYS[4], #ARGV - 1)
local left = redis.call('PTTL', KEYS[1])
if left > 0 then
  redis.call('PEXPIRE', KEYS[3], left)
  redis.call('PEXPIRE', KEYS[4], left)
end
return 1
