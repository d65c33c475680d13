//! Reconnect delays: exponential growth with jitter, so a coordinator restart is
//! not met by every edge at the same instant.

use std::time::Duration;

use rand::RngExt;

/// Exponential backoff with "equal jitter".
///
/// Attempt `k` (from 0) waits `c/2 + U(0, c/2)` where `c = min(max, base × 2^k)`.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// A backoff starting around `base` and never exceeding `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            attempt: 0,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self, rng: &mut impl rand::Rng) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        half + half.mul_f64(rng.random_range(0.0..=1.0))
    }

    /// Starts over after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn grows_to_the_cap_with_jitter() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let delays: Vec<_> = (0..8).map(|_| b.next_delay(&mut rng)).collect();
        let ceilings = [100, 200, 400, 800, 1600, 2000, 2000, 2000];
        for (d, c) in delays.iter().zip(ceilings) {
            let c = Duration::from_millis(c);
            assert!(*d >= c / 2 && *d <= c, "{d:?} outside [{:?}, {c:?}]", c / 2);
        }
        assert!(
            delays.windows(2).any(|w| w[0] != w[1]),
            "no jitter: {delays:?}"
        );
        b.reset();
        assert!(b.next_delay(&mut rng) <= Duration::from_millis(100));
    }
}
