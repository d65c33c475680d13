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
    /// Wall time until this clock reads `t_ms` (zero if it already has): what
    /// a thread that cannot await [`Clock::sleep`] waits.
    fn wall_until(&self, t_ms: i64) -> Duration {
        Duration::from_secs_f64((t_ms - self.now_ms()).max(0) as f64 / 1000.0 / self.speed())
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

/// The speeds a configured clock may run at, clock ms per wall ms: real time
/// up to 100 000×.
pub const SPEEDS: std::ops::RangeInclusive<f64> = 1.0..=100_000.0;

/// From `from_ms` of accelerated time on, the clock runs at `speed`: a
/// later phase of a [`ScaledClock`], so a twin can spend its wall time where
/// deadlines are at stake and hurry through the quiet tail of a trace.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Accelerated time, Unix ms, at which this phase starts.
    pub from_ms: i64,
    /// Accelerated ms per wall ms from then on; positive and finite.
    pub speed: f64,
}

/// One linear piece of a [`ScaledClock`]: from `wall_ms` ms of wall time after
/// the clock's creation, it reads `tide_ms` and advances `speed` ms per wall ms.
#[derive(Debug, Clone, Copy)]
struct Piece {
    wall_ms: f64,
    tide_ms: f64,
    speed: f64,
}

/// Time that runs faster than the wall clock from a chosen origin, for
/// replaying a day of traces in minutes: at `speed`, then at each later
/// [`Phase`]'s speed from its start.
///
/// Within the piece that starts `w_k` ms of wall after creation at time
/// `t_k`, with speed `s_k`: `now = t_k + s_k × (wall ms elapsed − w_k)`, and
/// the next piece starts at `w_{k+1} = w_k + (t_{k+1} − t_k) / s_k`. A sleep
/// ends at the wall instant that inverse gives for `now + d`, so sleepers
/// wake on time across a change of speed.
#[derive(Debug, Clone)]
pub struct ScaledClock {
    start: tokio::time::Instant,
    pieces: Vec<Piece>,
}

impl ScaledClock {
    /// A clock reading `origin_ms` now and advancing `speed` ms per wall ms.
    /// `speed` must be positive and finite; callers validate user input first.
    pub fn new(origin_ms: i64, speed: f64) -> Self {
        Self::phased(origin_ms, speed, &[])
    }

    /// As [`ScaledClock::new`], then at each of `phases`' speeds from its
    /// start; phases that start at or before `origin_ms` only set the speed
    /// now. `phases` must be in order of `from_ms`, each speed positive and
    /// finite; callers validate user input first.
    pub fn phased(origin_ms: i64, speed: f64, phases: &[Phase]) -> Self {
        let valid = |s: f64| s.is_finite() && s > 0.0;
        assert!(
            valid(speed) && phases.iter().all(|p| valid(p.speed)),
            "clock speed must be positive"
        );
        assert!(
            phases.windows(2).all(|w| w[0].from_ms < w[1].from_ms),
            "clock phases must be in order"
        );
        let mut now = Piece {
            wall_ms: 0.0,
            tide_ms: origin_ms as f64,
            speed,
        };
        let mut pieces = Vec::with_capacity(phases.len() + 1);
        for p in phases {
            let from = p.from_ms as f64;
            if from <= now.tide_ms {
                now.speed = p.speed;
                continue;
            }
            pieces.push(now);
            now = Piece {
                wall_ms: now.wall_ms + (from - now.tide_ms) / now.speed,
                tide_ms: from,
                speed: p.speed,
            };
        }
        pieces.push(now);
        ScaledClock {
            start: tokio::time::Instant::now(),
            pieces,
        }
    }

    /// The piece in force `wall_ms` after creation.
    fn piece_at_wall(&self, wall_ms: f64) -> Piece {
        let k = self.pieces.partition_point(|p| p.wall_ms <= wall_ms);
        self.pieces[k.saturating_sub(1)]
    }

    /// Wall ms after creation at which the clock reads `t_ms`.
    fn wall_at(&self, t_ms: i64) -> f64 {
        let t = t_ms as f64;
        let k = self.pieces.partition_point(|p| p.tide_ms <= t);
        let p = self.pieces[k.saturating_sub(1)];
        p.wall_ms + (t - p.tide_ms) / p.speed
    }

    /// What the clock reads `wall_ms` after creation.
    fn tide_at(&self, wall_ms: f64) -> i64 {
        let p = self.piece_at_wall(wall_ms);
        (p.tide_ms + (wall_ms - p.wall_ms) * p.speed) as i64
    }

    fn elapsed_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }
}

impl Clock for ScaledClock {
    fn now_ms(&self) -> i64 {
        self.tide_at(self.elapsed_ms())
    }

    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let target = self
            .now_ms()
            .saturating_add(d.as_millis().min(i64::MAX as u128) as i64);
        let wall_ms = self.wall_at(target);
        let until = self.start + Duration::from_secs_f64(wall_ms.max(0.0) / 1000.0);
        Box::pin(tokio::time::sleep_until(until))
    }

    fn speed(&self) -> f64 {
        self.piece_at_wall(self.elapsed_ms()).speed
    }

    fn wall_until(&self, t_ms: i64) -> Duration {
        let wall_ms = self.wall_at(t_ms) - self.elapsed_ms();
        Duration::from_secs_f64(wall_ms.max(0.0) / 1000.0)
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
    for_phases(speed, anchor_ms, &[])
}

/// As [`for_speed`], then at each of `phases`' speeds from its start (see
/// [`ScaledClock`]). Every process given the same speed, anchor and phases
/// agrees on the time, whenever each one started.
pub fn for_phases(speed: f64, anchor_ms: Option<i64>, phases: &[Phase]) -> SharedClock {
    if speed == 1.0 && phases.is_empty() {
        return Arc::new(SystemClock);
    }
    let wall = SystemClock.now_ms();
    let anchor = anchor_ms.unwrap_or(wall);
    // The clock as it ran from the anchor, read now.
    let from_anchor = ScaledClock::phased(anchor, speed, phases);
    let origin = from_anchor.tide_at((wall - anchor) as f64);
    Arc::new(ScaledClock::phased(origin, speed, phases))
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
    async fn a_sleep_across_a_change_of_speed_ends_on_time() {
        // 10× until 60 s of accelerated time, then 100×.
        let clock = ScaledClock::phased(
            0,
            10.0,
            &[Phase {
                from_ms: 60_000,
                speed: 100.0,
            }],
        );
        let started = tokio::time::Instant::now();
        assert_eq!(clock.wall_until(120_000), Duration::from_millis(6_600));
        // To 120 s: 60 s at 10× (6 s of wall), then 60 s at 100× (0.6 s).
        clock.sleep(Duration::from_secs(120)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(6_600));
        assert_eq!(clock.now_ms(), 120_000);
        assert_eq!(clock.speed(), 100.0);
    }

    #[test]
    fn phased_clocks_agree_whenever_they_start() {
        let wall = SystemClock.now_ms();
        let anchor = wall - 10_000;
        // From the anchor: 5 s of wall at 60× reach the phase, 5 s at 600× follow.
        let phases = [Phase {
            from_ms: anchor + 300_000,
            speed: 600.0,
        }];
        let clock = for_phases(60.0, Some(anchor), &phases);
        let expected = anchor + 300_000 + 3_000_000;
        assert!(
            (clock.now_ms() - expected).abs() < 600 * 200,
            "{} against {expected}",
            clock.now_ms()
        );
        assert_eq!(clock.speed(), 600.0);
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
