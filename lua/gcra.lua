-- Tollgate global limit: GCRA (generic cell rate algorithm, virtual scheduling), the Redis
-- twin of crates/limit Gcra. One atomic EVALSHA per decision.
--
-- State: the TAT (lua/tat.lua). A request passes if TAT may run at most tau = T * burst ahead
-- of now. Same traffic as a token bucket with one number of state. A TAT at or before now
-- equals a missing key, so the key expires (or is deleted) as soon as it is.
--
-- Returns {allowed, remaining, reset_us (until TAT is back at now), retry_after_us (>= 1 when
--          denied), delay_us (always 0)}. A cost above burst can never pass: its retry_after is
--          the time until the allowance is full again (at least 1), as the local limiter says.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt; then
-- lua/tat.lua: T, tau, left, us, store, owed, refund.)

if mode == 'refund' then return refund() end

lease_of(left(owed))
local ahead = owed + T * cost
if ahead <= tau then
  store(ahead)
  return admitted(left(ahead), us(ahead), 0)
end

local retry
if cost > burst then retry = owed else retry = ahead - tau end
return refused(left(owed), us(owed), us(retry))
