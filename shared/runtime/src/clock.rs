//! The one clock that everything which waits or sleeps reads, so the same daemon
//! code runs in real time, in accelerated time for demos, and under simulation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A source of time and of sleeps measured in that time.
pub trait Clock: Send + Sync + 'static {
    /// The current time, in Unix milliseconds of this clock.
    fn now_ms(&self) -> i64;
    /// Sleeps for `d` of this clock's time.
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;
    /// Seconds of this clock per wall second: what turns an interval on this
    /// clock into one for a process that lives in wall time (a task).
    fn speed(&self) -> f64 {
        1.0
    }
}

/// A clock shared between tasks.
pub type SharedClock = Arc<dyn Clock>;

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }

    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// Time that runs `speed` times faster than the wall clock from a chosen origin,
/// for replaying a day of traces in minutes.
///
/// `now = origin_ms + speed × (wall time elapsed since creation)`, in ms.
#[derive(Debug, Clone)]
pub struct ScaledClock {
    start: tokio::time::Instant,
    origin_ms: i64,
    speed: f64,
}

impl ScaledClock {
    /// A clock reading `origin_ms` now and advancing `speed` ms per wall ms.
    /// `speed` must be positive and finite; callers validate user input first.
    pub fn new(origin_ms: i64, speed: f64) -> Self {
        assert!(
            speed.is_finite() && speed > 0.0,
            "clock speed must be positive"
        );
        ScaledClock {
            start: tokio::time::Instant::now(),
            origin_ms,
            speed,
        }
    }
}

impl Clock for ScaledClock {
    fn now_ms(&self) -> i64 {
        let wall = self.start.elapsed().as_secs_f64() * 1000.0;
        self.origin_ms + (wall * self.speed) as i64
    }

    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(d.div_f64(self.speed)))
    }

    fn speed(&self) -> f64 {
        self.speed
    }
}

/// The deadline passed before the future finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out")]
pub struct Elapsed;

/// Runs `fut`, giving up after `d` of `clock`'s time.
pub async fn timeout<F: Future>(
    clock: &dyn Clock,
    d: Duration,
    fut: F,
) -> Result<F::Output, Elapsed> {
    tokio::select! {
        out = fut => Ok(out),
        () = clock.sleep(d) => Err(Elapsed),
    }
}

/// Picks the clock for a speed-up factor: the wall clock at 1, else a
/// [`ScaledClock`] anchored at `anchor_ms` (Unix ms of wall time), or at the
/// current wall time when no anchor is given.
///
/// Anchored clocks read `anchor_ms + speed × (wall − anchor_ms)`, so every
/// process given the same speed and anchor (a coordinator and its edges in a
/// demo or test) agrees on the accelerated time, whenever each one started.
pub fn for_speed(speed: f64, anchor_ms: Option<i64>) -> SharedClock {
    if speed == 1.0 {
        return Arc::new(SystemClock);
    }
    let wall = SystemClock.now_ms();
    let anchor = anchor_ms.unwrap_or(wall);
    let origin = anchor + ((wall - anchor) as f64 * speed) as i64;
    Arc::new(ScaledClock::new(origin, speed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn scaled_clock_runs_fast() {
        let clock = ScaledClock::new(1_000, 60.0);
        assert_eq!(clock.now_ms(), 1_000);
        // One virtual minute passes in one (paused, auto-advanced) wall second.
        clock.sleep(Duration::from_secs(60)).await;
        assert_eq!(clock.now_ms(), 1_000 + 60_000);
    }

    #[test]
    fn anchored_clocks_agree_whenever_they_start() {
        let wall = SystemClock.now_ms();
        // Anchored 10 wall seconds ago at 60×: 600 s of accelerated time later.
        let clock = for_speed(60.0, Some(wall - 10_000));
        let expected = wall - 10_000 + 600_000;
        assert!(
            (clock.now_ms() - expected).abs() < 60 * 200,
            "{}",
            clock.now_ms()
        );
        assert!((for_speed(1.0, Some(0)).now_ms() - wall).abs() < 200);
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_reads_the_given_clock() {
        let fast = ScaledClock::new(0, 1000.0);
        let never = std::future::pending::<()>();
        let started = tokio::time::Instant::now();
        assert_eq!(
            timeout(&fast, Duration::from_secs(10), never).await,
            Err(Elapsed)
        );
        assert_eq!(started.elapsed(), Duration::from_millis(10));
        assert_eq!(
            timeout(&SystemClock, Duration::from_secs(1), async { 7 }).await,
            Ok(7)
        );
    }
}
