// Copyright 2026 Cloudflare, Inc.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//! One deadline timer for the waits of a connection, one after the other.
//!
//! A kept-alive HTTP/1 connection waits twice per request: for the client's next request head
//! and for the upstream's response head. [`crate::protocols::http`]'s `timeout()` makes a new
//! timer for each wait: it allocates it, registers it in the runtime's timer wheel when the
//! wait is pending, and takes it out of the wheel again when the wait ends. [`ConnTimer`] keeps
//! one timer for the connection's life and moves its deadline for each wait instead. A later
//! deadline than the one the wheel holds costs one atomic exchange: the wheel still holds the
//! old slot, and when that slot comes it finds the later deadline and files the timer again
//! (tokio's `Sleep::reset`). That is nginx's and HAProxy's way with connection timers: they
//! update a deadline rather than make a timer per wait.
//!
//! A timer belongs to the runtime it was made on. The connection's task stays on its runtime,
//! so a downstream connection's timer may serve every wait of that connection, the upstream
//! waits it makes included. It is never kept with an upstream connection in the pool, which
//! another runtime may take.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Instant;

/// A connection's deadline timer: made at the first wait that is pending, then moved to each
/// wait's deadline (see the module's text).
#[derive(Default)]
pub struct ConnTimer(Option<Pin<Box<tokio::time::Sleep>>>);

impl std::fmt::Debug for ConnTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(s) => write!(f, "ConnTimer({:?})", s.deadline()),
            None => f.write_str("ConnTimer(unset)"),
        }
    }
}

/// The deadline passed before the future ended.
#[derive(Debug, PartialEq, Eq)]
pub struct Elapsed;

impl ConnTimer {
    /// `fut`, or [`Elapsed`] when `deadline` comes first. As with `timeout()`, a future that is
    /// ready at its first poll never touches the timer.
    pub async fn timeout<F: Future>(
        &mut self,
        deadline: Instant,
        fut: F,
    ) -> Result<F::Output, Elapsed> {
        let mut fut = pin!(fut);
        let mut armed = false;
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Ok(v));
            }
            if !armed {
                armed = true;
                self.arm(deadline);
            }
            // (Made by `arm` above; were it missing, the wait would end as timed out.)
            let Some(sleep) = self.0.as_mut() else {
                return Poll::Ready(Err(Elapsed));
            };
            match sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// The timer set to `deadline`: made on its first use, moved after.
    fn arm(&mut self, deadline: Instant) {
        let at = tokio::time::Instant::from_std(deadline);
        match &mut self.0 {
            Some(s) => s.as_mut().reset(at),
            None => self.0 = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }

    /// Whether the timer has been made (it has served a wait that was pending).
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A deadline on the runtime's clock (paused here: the std clock does not follow it).
    fn after(d: Duration) -> Instant {
        (tokio::time::Instant::now() + d).into_std()
    }

    #[tokio::test(start_paused = true)]
    async fn ready_futures_never_make_the_timer() {
        let mut t = ConnTimer::default();
        let v = t.timeout(after(Duration::ZERO), async { 7 }).await;
        assert_eq!(v, Ok(7));
        assert!(!t.is_set());
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_future_ends_at_its_deadline_and_the_timer_serves_the_next_wait() {
        let mut t = ConnTimer::default();
        let began = tokio::time::Instant::now();
        let r = t
            .timeout(
                after(Duration::from_secs(5)),
                std::future::pending::<()>(),
            )
            .await;
        assert_eq!(r, Err(Elapsed));
        assert_eq!(began.elapsed(), Duration::from_secs(5));
        assert!(t.is_set());

        // An elapsed timer, moved later: waits again, and a future that ends first wins.
        let r = t
            .timeout(after(Duration::from_secs(5)), async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                "done"
            })
            .await;
        assert_eq!(r, Ok("done"));

        // Moved later while still filed (the lazy move): the later deadline holds, not the
        // earlier one the wheel had.
        let began = tokio::time::Instant::now();
        let r = t
            .timeout(
                after(Duration::from_secs(30)),
                std::future::pending::<()>(),
            )
            .await;
        assert_eq!(r, Err(Elapsed));
        assert_eq!(began.elapsed(), Duration::from_secs(30));

        // Moved earlier: the earlier deadline holds.
        let _ = t
            .timeout(
                after(Duration::from_secs(60)),
                tokio::time::sleep(Duration::from_millis(10)),
            )
            .await;
        let began = tokio::time::Instant::now();
        let r = t
            .timeout(
                after(Duration::from_secs(2)),
                std::future::pending::<()>(),
            )
            .await;
        assert_eq!(r, Err(Elapsed));
        assert_eq!(began.elapsed(), Duration::from_secs(2));
    }
}
