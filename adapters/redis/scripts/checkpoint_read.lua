-- read_checkpoint(state, nodes, vars): an execution's three hashes, each a flat HGETALL list
-- (S1), read inside the calling script so no concurrent save can tear them.
local function read_checkpoint(state, nodes, vars)
  return {redis.call('HGETALL', state), redis.call('HGETALL', nodes), redis.call('HGETALL', vars)}
end
