-- Move due carriers from the delay set into the task stream, atomically (W8, V8).
-- KEYS[1] delay set (score = due ms, member = {"id": timer id, "fields": [k1, v1, k2, v2, ...]})
-- KEYS[2] normal task stream (the same hash tag: the queue's {<queue>}, or its partition's
--         {<queue>:p<k>})   KEYS[3] its high stream   KEYS[4] its low stream
-- A member that names "priority" "high" or "low" moves into that stream; any other into KEYS[2].
-- ARGV[1] now in ms (members with score <= now are due)   ARGV[2] limit (> 0)
-- Returns how many members were moved. Each member is added to the stream and removed from
-- the set in the same script, so a carrier is never in both places nor in neither. A member
-- that is not a carrier this adapter wrote (a foreign writer) is moved too, as the single
-- field `delayed_raw`, so the worker dead-letters it with evidence instead of it blocking
-- the head of the set for ever (R4). Every member is checked before the first write: a
-- script that fails half-way keeps the writes it already made.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local entries = {}
local targets = {}
local streams = {high = KEYS[3], low = KEYS[4]}
for i, member in ipairs(due) do
  local ok, carrier = pcall(cjson.decode, member)
  local fields = nil
  targets[i] = KEYS[2]
  if ok and type(carrier) == 'table' and streams[carrier['priority']] then
    targets[i] = streams[carrier['priority']]
  end
  if ok and type(carrier) == 'table' and type(carrier['fields']) == 'table' then
    fields = carrier['fields']
    local n = #fields
    if n == 0 or n % 2 == 1 then
      fields = nil
    else
      for j = 1, n do
        if type(fields[j]) ~= 'string' then
          fields = nil
          break
        end
      end
    end
  end
  if fields == nil then
    fields = {'delayed_raw', member}
  end
  entries[i] = fields
end
for i, member in ipairs(due) do
  redis.call('XADD', targets[i], '*', unpack(entries[i]))
  redis.call('ZREM', KEYS[1], member)
end
return #due
