-- Tollgate global limit: leaky bucket as nginx limit_req does it, the Redis twin of
-- crates/limit LeakyBucket. One atomic EVALSHA per decision.
--
-- Admission is GCRA (see gcra.lua: the same TAT, lua/tat.lua): at most `burst` units queued,
-- drained at the rate. The difference is that an admitted request is not passed on at once: it
-- is held until its turn, i.e. until the queue ahead of it (TAT before this request, minus
-- now) has drained, except that the first `delay` queued units pass without waiting (nginx's delay=; delay >= burst is nodelay, plain
-- GCRA). The hold is returned, not slept here: the proxy waits, Redis never blocks.
--
-- Returns {allowed, remaining, reset_us, retry_after_us (>= 1 when denied), delay_us (how long
--          the proxy holds an admitted request; 0 when denied or refunding)}.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt; then
-- lua/tat.lua: T, tau, left, us, store, owed, refund.)

if mode == 'lease' then
  return redis.error_reply('ERR tollgate limiter script: a leaky bucket paces requests one by one: no lease')
end
if mode == 'refund' then return refund() end

local ahead = owed + T * cost
if ahead <= tau then
  store(ahead)
  -- Held until the queue ahead of it has drained, but for the first `delay` units.
  local hold = math.max(0, owed - delay * T)
  return {1, left(ahead), us(ahead), 0, us(hold)}
end

local retry
if cost > burst then retry = owed else retry = ahead - tau end
return {0, left(owed), us(owed), math.max(1, us(retry)), 0}
