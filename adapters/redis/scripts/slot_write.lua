-- Write one slot table's change iff its version is still the one read (compare-and-set).
-- The rules are plaita.domain.slots'; this only checks the version and applies the change.
-- KEYS[1] the table hash (version, limit, holders JSON, reserved JSON)
-- KEYS[2] the FIFO list (entries "<carrier id> <execution id>", head first)
-- KEYS[3] the parked carriers hash (carrier id -> envelope fields JSON)
-- ARGV[1] the version read ("0": the table did not exist), ARGV[2] the limit,
-- ARGV[3] holders JSON, ARGV[4] reserved JSON,
-- then n, n entries to remove from the FIFO; m, m entries to put back at its head (in order);
-- then the entry to append ("" for none), its carrier id and envelope JSON;
-- then k, k carrier ids whose parked envelopes to delete;
-- then the ms an idle table keeps its version, when the change leaves it idle (no holder,
-- reservation or waiter), else "0": its FIFO and parked keys go, and the table keeps only
-- its version, for that long (a table of every key value ever seen does not stay behind;
-- the version outlives any reader of the table before it).
-- Returns {written (0/1), the FIFO's length after}.
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if version ~= tonumber(ARGV[1]) then
  return {0, redis.call('LLEN', KEYS[2])}
end
redis.call('HSET', KEYS[1], 'version', version + 1, 'limit', ARGV[2],
  'holders', ARGV[3], 'reserved', ARGV[4])
local i = 5
local n = tonumber(ARGV[i])
for j = 1, n do
  redis.call('LREM', KEYS[2], 1, ARGV[i + j])
end
i = i + n + 1
local m = tonumber(ARGV[i])
for j = m, 1, -1 do
  redis.call('LPUSH', KEYS[2], ARGV[i + j])
end
i = i + m + 1
if ARGV[i] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i + 1], ARGV[i + 2])
end
i = i + 3
local k = tonumber(ARGV[i])
for j = 1, k do
  redis.call('HDEL', KEYS[3], ARGV[i + j])
end
local idle_ms = tonumber(ARGV[i + k + 1])
if idle_ms > 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HDEL', KEYS[1], 'limit', 'holders', 'reserved')
  redis.call('PEXPIRE', KEYS[1], idle_ms)
else
  redis.call('PERSIST', KEYS[1])
end
return {1, redis.call('LLEN', KEYS[2])}
