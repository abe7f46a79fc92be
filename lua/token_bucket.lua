-- Tollgate global limit: token bucket (exact integer refill), the Redis twin of
-- crates/limit TokenBucket. One atomic EVALSHA per decision.
--
-- State: hash KEYS[1] { t = whole tokens held, c = time (us) up to which refill is credited }.
-- Refill credits only whole tokens and advances c by exactly the time those tokens took
-- (rounded up), so no fraction of a token is lost or invented between calls. A missing key is
-- a full bucket; a full bucket is never stored (DEL), so idle keys cost no memory.
--
-- Returns {allowed, remaining, reset_us (until full), retry_after_us (>= 1 when denied),
--          delay_us (always 0)}. A cost above burst can never pass: its retry_after is the time
--          to a full bucket (at least 1), as the local limiter reports.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

-- Time to accrue `units` tokens, rounded up (never admits early).
local function time_for(units) return math.ceil(units * period / count) end

-- Time from now until the bucket holds `want` tokens: 0 if it already does, else >= 1.
local function time_until(tk, c, want)
  if tk >= want then return 0 end
  local already = now - c
  if already < 0 then already = 0 end
  return math.max(time_for(want - tk) - already, 1)
end

-- Persist a state: a full bucket equals a missing key, anything else lives until it is full
-- (counted from c, so a clock that went backwards cannot expire it early).
local function store(tk, c)
  if tk >= burst then
    redis.call('DEL', key)
  else
    local full_in = math.max(1, c + time_for(burst - tk) - now)
    redis.call('HSET', key, 't', fmt(tk), 'c', fmt(c))
    redis.call('PEXPIRE', key, fmt(math.ceil(full_in / 1000) + 1000))
  end
end

local st = redis.call('HMGET', key, 't', 'c')
local tk, c = tonumber(st[1]), tonumber(st[2])
if tk == nil or c == nil then
  if mode == 'refund' then return {1, burst, 0, 0, 0} end
  tk, c = burst, now
end
local tk0, c0 = tk, c

-- Refill. A full bucket (or a clock that went backwards) credits nothing.
if tk >= burst or now <= c then
  if tk >= burst then tk, c = burst, math.max(now, c) end
else
  local elapsed = now - c
  -- Capping by the time to full keeps elapsed * count small (exact in doubles).
  if elapsed >= time_for(burst - tk) then
    tk, c = burst, now
  else
    local added = math.floor(elapsed * count / period)
    tk = tk + added
    c = c + math.min(time_for(added), elapsed)
  end
end

if mode == 'refund' then
  tk = math.min(burst, tk + cost)
  store(tk, c)
  return {1, tk, time_until(tk, c, burst), 0, 0}
end

lease_of(tk)
if tk >= cost then
  tk = tk - cost
  store(tk, c)
  return admitted(tk, time_until(tk, c, burst), 0)
end

local retry = math.max(1, time_until(tk, c, math.min(cost, burst)))
if tk ~= tk0 or c ~= c0 then store(tk, c) end
return refused(tk, time_until(tk, c, burst), retry)
