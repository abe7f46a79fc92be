-- Tollgate global limit: requests in flight per key, shared by every gateway (nginx's
-- limit_conn across a fleet). `burst` is the cap; `period` (us) is how long a gateway's slots
-- count after it last renewed them, so a crashed gateway's slots come back by themselves.
--
-- State: hash KEYS[1] { <gateway> = slots it holds, <gateway>:t = until when they count (us,
-- Redis time) }. Lapsed entries are dropped whenever the key is touched; the key expires one
-- period after its last write.
--
-- ARGV as the prelude says, then the calling gateway's id, last. Modes:
--   acquire: take `cost` slots if the live total stays within burst;
--   refund:  give back `cost` slots (a request ended); never below zero;
--   hold:    this gateway holds `cost` slots of the key now (its periodic renewal: it also
--            restores slots that lapsed while it could not reach Redis).
-- Returns {allowed, remaining, 0, retry_after_us (1 s when refused: a slot frees when a
--          request ends, which nobody can foretell), 0}.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

local me = ARGV[#ARGV]
if me == nil or me == '' or string.find(me, ':', 1, true) then
  return redis.error_reply('ERR tollgate limiter script: bad arguments')
end
local ttl = period

local fields = redis.call('HGETALL', key)
local map = {}
for i = 1, #fields, 2 do map[fields[i]] = fields[i + 1] end
local live, mine = 0, 0
for f, v in pairs(map) do
  if not string.find(f, ':t', 1, true) then
    local untl = tonumber(map[f .. ':t'] or '0') or 0
    if untl < now then
      redis.call('HDEL', key, f, f .. ':t')
    else
      local n = tonumber(v) or 0
      live = live + n
      if f == me then mine = n end
    end
  end
end

local function keep(n)
  if n > 0 then
    redis.call('HSET', key, me, fmt(n), me .. ':t', fmt(now + ttl))
  else
    redis.call('HDEL', key, me, me .. ':t')
  end
  if redis.call('HLEN', key) == 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, fmt(math.ceil(ttl / 1000) + 1000))
  end
end

if mode == 'refund' then
  local after = math.max(0, mine - cost)
  keep(after)
  return {1, math.max(0, burst - (live - mine + after)), 0, 0, 0}
end

if mode == 'hold' then
  keep(cost)
  return {1, math.max(0, burst - (live - mine + cost)), 0, 0, 0}
end

if live + cost <= burst then
  keep(mine + cost)
  return {1, burst - live - cost, 0, 0, 0}
end
return {0, math.max(0, burst - live), 0, 1000000, 0}
