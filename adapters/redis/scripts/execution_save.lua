-- Fenced incremental save (W4, S3): write one step's changes only under the current lease
-- generation, and never to a deleted execution (W13).
-- KEYS[1] fencegen   KEYS[2] state (hash: header field -> JSON)   KEYS[3] nodes (hash)
-- KEYS[4] vars (hash)   KEYS[5] tombstone
-- ARGV[1] fence the writer holds
-- ARGV[2] '1': full save (replace every part) | '0': delta on top of the stored state
-- ARGV[3] header pairs   ARGV[4] node pairs   ARGV[5] removed nodes
-- ARGV[6] variable pairs   ARGV[7] removed variables
-- ARGV[8...] the header fields and values, node ids and results, removed node ids, variable
--            names and values, removed variable names, in that order.
-- Returns {outcome, current generation or nil}; outcome is
--   'ok'       written;
--   'fenced'   the generation is not ARGV[1]: nothing written;
--   'deleted'  a tombstone exists: nothing written;
--   'missing'  a delta met no stored state: nothing written, the caller saves in full.
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  return {'fenced', current}
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'deleted', current}
end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
elseif redis.call('EXISTS', KEYS[2]) == 0 then
  return {'missing', current}
end

local unpack = unpack or table.unpack
local position = 8
-- Run `command` on `key` over the next `count` items of `width` arguments each, in chunks so
-- a full save of a long run never unpacks more values than Lua's stack allows.
local function each(command, key, count, width)
  local last = position + count * width - 1
  local chunk = 256 * width
  local first = position
  while first <= last do
    local stop = math.min(first + chunk - 1, last)
    redis.call(command, key, unpack(ARGV, first, stop))
    first = stop + 1
  end
  position = last + 1
end

each('HSET', KEYS[2], tonumber(ARGV[3]), 2)
each('HSET', KEYS[3], tonumber(ARGV[4]), 2)
each('HDEL', KEYS[3], tonumber(ARGV[5]), 1)
each('HSET', KEYS[4], tonumber(ARGV[6]), 2)
each('HDEL', KEYS[4], tonumber(ARGV[7]), 1)
return {'ok', current}
