-- Tollgate's shared blocks: one hash holding every block an escalation ladder imposed, so each
-- gateway learns the blocks (and the lifts) made by the others when it polls.
--
-- KEYS[1] the registry hash ({tollgate:blocks}: one slot, safe on Redis Cluster).
-- ARGV[1] mode:
--   block LIMIT HASH MS RUNG  block LIMIT's key HASH for MS from now, unless a block from a rung
--                             at least as high is in force; returns the block's end (ms).
--   lift  LIMIT [HASH]        lifts HASH, or every block of LIMIT: kept as tombstones until they
--                             would have ended (at least GRACE), so polling gateways see the
--                             lift; for GRACE after a lift, blocks of that key from gateways
--                             that have not seen it yet are ignored. Returns how many were in
--                             force.
--   list                      returns {now_ms, field, value, ...}, dropping entries that ended.
-- Fields are "LIMIT/HASH" (HASH: 16 hex digits); values "UNTIL_MS:RUNG:0" for blocks and
-- "UNTIL_MS:RUNG:1:LIFTED_AT_MS" for lifts.
-- Time comes only from Redis TIME. The hash expires 1 s after its last block ends.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local reg, mode = KEYS[1], ARGV[1]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Longer than a few of the gateways' 1 s polls.
local GRACE = 5000

local function fmt(x) return string.format('%.0f', x) end
local function parse(v)
  local u, r, l, at = string.match(v, '^(%d+):(%d+):([01]):?(%d*)$')
  return tonumber(u), tonumber(r), l, tonumber(at)
end
-- When an entry may go: a block when it ends, a lift not before its grace is over.
local function ends(v)
  local u, _, l, at = parse(v)
  if u == nil then return nil end
  if l == '1' and at and at + GRACE > u then return at + GRACE end
  return u
end

if mode == 'block' then
  local field = ARGV[2] .. '/' .. ARGV[3]
  local ms, rung = tonumber(ARGV[4]), tonumber(ARGV[5])
  if ms == nil or ms < 1 or rung == nil or rung < 0 or not string.match(ARGV[3], '^%x+$') then
    return redis.error_reply('ERR tollgate blocks script: bad arguments')
  end
  local cur = redis.call('HGET', reg, field)
  if cur then
    local u, r, l, at = parse(cur)
    if u and u > now and l == '0' and r >= rung then return fmt(u) end
    if l == '1' and at and now < at + GRACE then return '0' end
  end
  local untl = now + ms
  redis.call('HSET', reg, field, fmt(untl) .. ':' .. rung .. ':0')
  local ttl = redis.call('PTTL', reg)
  if ttl < untl - now + 1000 then redis.call('PEXPIRE', reg, untl - now + 1000) end
  return fmt(untl)
elseif mode == 'lift' then
  local prefix, hash = ARGV[2] .. '/', ARGV[3] or ''
  local n = 0
  local function lift(field, v)
    local u, r, l = parse(v)
    if u and u > now and l == '0' then
      n = n + 1
      redis.call('HSET', reg, field, fmt(u) .. ':' .. r .. ':1:' .. fmt(now))
      if redis.call('PTTL', reg) < GRACE + 1000 then redis.call('PEXPIRE', reg, GRACE + 1000) end
    end
  end
  if hash ~= '' then
    local v = redis.call('HGET', reg, prefix .. hash)
    if v then lift(prefix .. hash, v) end
  else
    local all = redis.call('HGETALL', reg)
    for i = 1, #all, 2 do
      local f = all[i]
      if #f == #prefix + 16 and string.sub(f, 1, #prefix) == prefix then lift(f, all[i + 1]) end
    end
  end
  return n
elseif mode == 'list' then
  local all = redis.call('HGETALL', reg)
  local out = { fmt(now) }
  for i = 1, #all, 2 do
    local u = ends(all[i + 1])
    if u == nil or u <= now then
      redis.call('HDEL', reg, all[i])
    else
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end
return redis.error_reply('ERR tollgate blocks script: unknown mode')
