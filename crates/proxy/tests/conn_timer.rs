//! Vendor patch 0028's connection timer (`pingora::protocols::http::conn_timer`), on a real
//! runtime clock: one timer serves a connection's waits one after the other, moved later in
//! place and earlier by filing it again. (The vendored crate's own tests need tokio's paused
//! clock, which this workspace does not build.)

use pingora::protocols::http::conn_timer::{ConnTimer, Elapsed};
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

#[tokio::test]
async fn a_ready_future_never_makes_the_timer() {
    let mut t = ConnTimer::default();
    assert_eq!(t.timeout(Instant::now(), async { 7 }).await, Ok(7));
    assert!(!t.is_set());
}

#[tokio::test]
async fn one_timer_serves_waits_in_turn_with_each_deadline_kept() {
    let mut t = ConnTimer::default();
    // A pending wait ends at its deadline, not before.
    let began = Instant::now();
    let r = t
        .timeout(began + 60 * MS, std::future::pending::<()>())
        .await;
    assert_eq!(r, Err(Elapsed));
    assert!(began.elapsed() >= 60 * MS, "{:?}", began.elapsed());
    assert!(t.is_set());

    // Elapsed, then moved later: a future that ends first wins.
    let r = t
        .timeout(Instant::now() + 2_000 * MS, async {
            tokio::time::sleep(20 * MS).await;
            "done"
        })
        .await;
    assert_eq!(r, Ok("done"));

    // Moved later while still filed at 2 s (the in-place move): a later deadline holds.
    let r = t
        .timeout(Instant::now() + 3_000 * MS, async {
            tokio::time::sleep(20 * MS).await;
        })
        .await;
    assert_eq!(r, Ok(()));

    // Moved earlier than the filed 3 s: the earlier deadline holds (filed again).
    let began = Instant::now();
    let r = t
        .timeout(began + 80 * MS, std::future::pending::<()>())
        .await;
    assert_eq!(r, Err(Elapsed));
    let took = began.elapsed();
    assert!(took >= 80 * MS && took < 1_500 * MS, "{took:?}");

    // Moved later again, past a deadline the wheel had: the wait lasts to the new one.
    let _ = t.timeout(Instant::now() + 40 * MS, async {}).await;
    let began = Instant::now();
    let r = t
        .timeout(began + 150 * MS, std::future::pending::<()>())
        .await;
    assert_eq!(r, Err(Elapsed));
    assert!(began.elapsed() >= 150 * MS, "{:?}", began.elapsed());
}
