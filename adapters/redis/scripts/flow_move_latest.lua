-- Move one owner's latest pointer of a flow, compare-and-set (S2). Which version should be
-- the latest is the caller's decision; this script only compares for equality.
-- KEYS[1] the owner's latest pointer of the flow, KEYS[2] the new version's document key
--         (both on the flow's hash tag)
-- ARGV[1] the new version, ARGV[2] '1' when a version is expected, '0' when no latest is,
-- ARGV[3] the expected version (when ARGV[2] is '1')
-- Returns 1 when moved; 0, writing nothing, when the pointer names something else than the
-- expected or the new version is not stored.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
local current = redis.call('GET', KEYS[1])
if ARGV[2] == '1' then
  if current ~= ARGV[3] then
    return 0
  end
elseif current then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
