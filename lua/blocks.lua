-- Tollgate's shared blocks: a registry of the blocks escalation ladders imposed, with a change
-- log, so that each gateway fetches only what changed since its last poll (once a second).
--
-- KEYS (one hash tag, so one slot: safe on Redis Cluster)
--   [1] {tollgate:blocks}        hash  LIMIT/HASH -> "UNTIL_MS:RUNG:0" (a block) or
--                                      "UNTIL_MS:RUNG:1:LIFTED_AT_MS" (a lift: a tombstone)
--   [2] {tollgate:blocks}:seq    zset  field -> number of its last change
--   [3] {tollgate:blocks}:ends   zset  field -> when the entry may go (ms)
--   [4] {tollgate:blocks}:n      the change counter
-- ARGV[1] mode:
--   block LIMIT HASH MS RUNG  block for MS from now unless a block from a rung at least as high
--                             is in force; for GRACE after a lift, blocks of that key from
--                             gateways that have not seen the lift yet are ignored. Returns the
--                             block's end (ms), or 0 when ignored.
--   lift  LIMIT [HASH]        lifts HASH, or every block of LIMIT; returns how many were in force.
--   list  SINCE COUNT         drops entries that ended (at most 1000 per call), then returns
--                             {now_ms, counter, last_seq, more, field, value, ...}: the entries
--                             changed after SINCE, at most COUNT, oldest change first.
-- Time comes only from Redis TIME. Every key expires 1 s after the last entry may go.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local reg, seqz, ends, ctr = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode = ARGV[1]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- Longer than a few of the gateways' 1 s polls.
local GRACE = 5000

local function fmt(x) return string.format('%.0f', x) end
local function parse(v)
  local u, r, l, at = string.match(v, '^(%d+):(%d+):([01]):?(%d*)$')
  return tonumber(u), tonumber(r), l, tonumber(at)
end

local function keep_until(t)
  local ttl = t - now + 1000
  for _, k in ipairs({ reg, seqz, ends, ctr }) do
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
  end
end

local function write(field, value, gone_at)
  redis.call('HSET', reg, field, value)
  redis.call('ZADD', seqz, redis.call('INCR', ctr), field)
  redis.call('ZADD', ends, gone_at, field)
  keep_until(gone_at)
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
  write(field, fmt(untl) .. ':' .. rung .. ':0', untl)
  return fmt(untl)
elseif mode == 'lift' then
  local prefix, hash = ARGV[2] .. '/', ARGV[3] or ''
  local fields
  if hash ~= '' then
    fields = { prefix .. hash }
  else
    fields = {}
    for _, f in ipairs(redis.call('ZRANGE', ends, 0, -1)) do
      if #f == #prefix + 16 and string.sub(f, 1, #prefix) == prefix then fields[#fields + 1] = f end
    end
  end
  local n = 0
  for _, f in ipairs(fields) do
    local v = redis.call('HGET', reg, f)
    if v then
      local u, r, l = parse(v)
      if u and u > now and l == '0' then
        n = n + 1
        write(f, fmt(u) .. ':' .. r .. ':1:' .. fmt(now), math.max(u, now + GRACE))
      end
    end
  end
  return n
elseif mode == 'list' then
  local since, count = tonumber(ARGV[2]), tonumber(ARGV[3])
  if since == nil or count == nil or count < 1 then
    return redis.error_reply('ERR tollgate blocks script: bad arguments')
  end
  for _, f in ipairs(redis.call('ZRANGEBYSCORE', ends, '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('HDEL', reg, f)
    redis.call('ZREM', seqz, f)
    redis.call('ZREM', ends, f)
  end
  local changed = redis.call('ZRANGEBYSCORE', seqz, '(' .. fmt(since), '+inf', 'WITHSCORES', 'LIMIT', 0, count + 1)
  local out = { fmt(now), fmt(tonumber(redis.call('GET', ctr) or '0')), fmt(since), '0' }
  local taken = 0
  for i = 1, #changed, 2 do
    if taken == count then
      out[4] = '1'
      break
    end
    local v = redis.call('HGET', reg, changed[i])
    if v then
      out[#out + 1] = changed[i]
      out[#out + 1] = v
    end
    out[3] = changed[i + 1]
    taken = taken + 1
  end
  return out
end
return redis.error_reply('ERR tollgate blocks script: unknown mode')
