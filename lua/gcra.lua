-- Tollgate global limit: GCRA (generic cell rate algorithm, virtual scheduling), the Redis
-- twin of crates/limit Gcra. One atomic EVALSHA per decision.
--
-- State: string KEYS[1] = TAT, the theoretical arrival time (us) of the next request; a
-- missing key is 0 (nothing owed). Each unit pushes TAT one emission interval T = ceil(period /
-- count) further; a request passes if TAT may run at most tau = T * burst ahead of now. Same
-- traffic as a token bucket with one number of state. A TAT at or before now equals a missing
-- key, so the key expires (or is deleted) as soon as it is.
--
-- Returns {allowed, remaining, reset_us (until TAT is back at now), retry_after_us (>= 1 when
--          denied), delay_us (always 0)}. A cost above burst can never pass: its retry_after is
--          the time until the allowance is full again (at least 1), as the local limiter says.
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
local new_tat = math.max(tat, now) + T * cost
local ahead = new_tat - now
if ahead <= tau then
  redis.call('SET', key, fmt(new_tat), 'PX', fmt(math.ceil(ahead / 1000) + 1000))
  return {1, left(ahead), ahead, 0, 0}
end

local owed = math.max(0, tat - now)
local retry
if cost > burst then retry = owed else retry = ahead - tau end
return {0, left(owed), owed, math.max(1, retry), 0}
