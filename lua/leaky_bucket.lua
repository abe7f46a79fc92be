-- Tollgate global limit: leaky bucket as nginx limit_req does it, the Redis twin of
-- crates/limit LeakyBucket. One atomic EVALSHA per decision.
--
-- Admission is GCRA (see gcra.lua: same state, a TAT string, T = ceil(period / count),
-- tau = T * burst): at most `burst` units queued, drained at the rate. The difference is that
-- an admitted request is not passed on at once: it is held until its turn, i.e. until the
-- queue ahead of it (TAT before this request, minus now) has drained, except that the first
-- `delay` queued units pass without waiting (nginx's delay=; delay >= burst is nodelay, plain
-- GCRA). The hold is returned, not slept here: the proxy waits, Redis never blocks.
--
-- Returns {allowed, remaining, reset_us, retry_after_us (>= 1 when denied), delay_us (how long
--          the proxy holds an admitted request; 0 when denied or refunding)}.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

local T = math.max(1, math.ceil(period / count))
local tau = T * burst

-- Units still available when TAT is `ahead` us in the future.
local function left(ahead)
  return math.max(0, math.min(burst, math.floor((tau - ahead) / T)))
end

local stored = tonumber(redis.call('GET', key))

if mode == 'refund' then
  if stored == nil then return {1, burst, 0, 0, 0} end
  local tat = math.max(0, stored - T * cost)
  if tat <= now then
    redis.call('DEL', key)
    return {1, burst, 0, 0, 0}
  end
  local ahead = tat - now
  redis.call('SET', key, fmt(tat), 'PX', fmt(math.ceil(ahead / 1000) + 1000))
  return {1, left(ahead), ahead, 0, 0}
end

local tat = stored or 0
local start = math.max(tat, now)
local new_tat = start + T * cost
local ahead = new_tat - now
if ahead <= tau then
  redis.call('SET', key, fmt(new_tat), 'PX', fmt(math.ceil(ahead / 1000) + 1000))
  local hold = math.max(0, (start - now) - delay * T)
  return {1, left(ahead), ahead, 0, hold}
end

local owed = math.max(0, tat - now)
local retry
if cost > burst then retry = owed else retry = ahead - tau end
return {0, left(owed), owed, math.max(1, retry), 0}
