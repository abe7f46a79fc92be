-- Tollgate global limit: GCRA (generic cell rate algorithm, virtual scheduling), the Redis
-- twin of crates/limit Gcra. One atomic EVALSHA per decision.
--
-- State: string KEYS[1] = TAT, the theoretical arrival time (us) of the next request; a
-- missing key is 0 (nothing owed). Each unit pushes TAT one emission interval T = ceil(period /
-- count) further; a request passes if TAT may run at most tau = T * burst ahead of now. Same
-- traffic as a token bucket with one number of state. A TAT at or before now equals a missing
-- key, so the key expires (or is deleted) as soon as it is.
--
-- KEYS[1] the limiter key (the only key touched: safe on Redis Cluster).
-- ARGV    count, period_us (rate = count per period), burst (capacity), cost,
--         mode ("acquire" | "refund": give back `cost` taken by an acquire another limit
--         denied; never creates a key), delay (ignored here).
-- Time comes only from Redis TIME so every gateway shares one clock.
-- Returns {allowed, remaining, reset_us (until TAT is back at now), retry_after_us (>= 1 when
--          denied), delay_us (always 0)}. A cost above burst can never pass: its retry_after is
--          the time until the allowance is full again (at least 1), as the local limiter says.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local key = KEYS[1]
local count, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, cost = tonumber(ARGV[3]), tonumber(ARGV[4])
local mode = ARGV[5]
local function bad(x) return x == nil or x < 1 or x > 9007199254740991 or x ~= math.floor(x) end
if bad(count) or bad(period) or bad(burst) or bad(cost)
    or (mode ~= 'acquire' and mode ~= 'refund') then
  return redis.error_reply('ERR tollgate gcra: bad arguments')
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- Integers as strings: tostring() would print 16-digit numbers in %.14g and lose digits.
local function fmt(x) return string.format('%.0f', x) end

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
