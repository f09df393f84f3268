-- The next fence generation of an execution (W4), included by the scripts that move it on.
-- One more than the stored one, and never less than the serving node's clock in milliseconds:
-- a Redis failover can lose the last increments an old master acknowledged (replication is
-- asynchronous), and a plain INCR on the promoted replica would then hand a generation out a
-- second time, to a second holder. The clock floor moves past every generation handed out
-- before the failover, which took longer than a millisecond (ADR 0019). String-formatted, so
-- no precision is lost on the way into the key.
local function next_fence(key)
  local current = tonumber(redis.call('GET', key) or '0')
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local generation = math.max(current + 1, now_ms)
  redis.call('SET', key, string.format('%d', generation))
  return generation
end
