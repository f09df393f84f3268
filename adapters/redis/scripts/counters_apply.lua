-- Apply budget counter changes to an execution's counters hash, atomically (W7, W8).
-- KEYS[1] counters hash
-- ARGV[1] ttl in ms (sliding: refreshed by every call)
-- ARGV[2..] (op, field) pairs, applied in order:
--   incr <field>       HINCRBY field 1
--   del <field>        HDEL field
--   delprefix <prefix> HDEL every field that starts with prefix
-- Returns the hash after the changes as HGETALL does (absent fields are 0 to the caller).
-- The ops are checked before the first write: a script that fails half-way keeps the writes
-- it already made.
local key = KEYS[1]
for i = 2, #ARGV, 2 do
  local op = ARGV[i]
  if (op ~= 'incr' and op ~= 'del' and op ~= 'delprefix') or ARGV[i + 1] == nil then
    return redis.error_reply('ERR unknown counter change ' .. tostring(op))
  end
end
for i = 2, #ARGV, 2 do
  local op, field = ARGV[i], ARGV[i + 1]
  if op == 'incr' then
    redis.call('HINCRBY', key, field, 1)
  elseif op == 'del' then
    redis.call('HDEL', key, field)
  else
    local names = redis.call('HKEYS', key)
    for _, name in ipairs(names) do
      if string.sub(name, 1, #field) == field then
        redis.call('HDEL', key, name)
      end
    end
  end
end
redis.call('PEXPIRE', key, ARGV[1])
return redis.call('HGETALL', key)
