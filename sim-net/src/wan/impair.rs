//! The sans-IO impairment of one direction of a path: datagrams and the time go
//! in, delivered datagrams and the next deadline come out. Delay, jitter, loss,
//! duplication, reordering and the rate limit are `str0m-netem`'s; outages are
//! added on top. All randomness comes from a seed, so a test with explicit
//! times sees the same decisions on every run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use str0m_netem::{
    Bitrate, DataSize, GilbertElliot, Input, LossModel, Netem, NetemConfig, Output, Probability,
    RandomLoss,
};

use super::scenario::{Flap, Impairment, Window};

/// A datagram in flight through the relay: the client it belongs to (its
/// source going up, its destination coming down) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// The client's address as the relay's listener sees it.
    pub client: SocketAddr,
    /// The payload, unchanged.
    pub bytes: Vec<u8>,
}

impl AsRef<[u8]> for Datagram {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Gilbert-Elliott run lengths for a mean loss and a mean burst length.
///
/// The chain enters its bad state (every datagram lost) with probability `p`
/// per datagram and leaves it with `r`; in the steady state a fraction
/// `p / (p + r)` of datagrams are lost and a burst lasts `1 / r` datagrams on
/// average. For a mean loss `L` (a fraction, `0 < L < 1`) and a mean burst `B`
/// (datagrams, `B ≥ 1`) that gives `r = 1 / B` and `p = L / (B · (1 − L))`, so
/// the mean run of good datagrams is `1 / p = B · (1 − L) / L`.
///
/// Returns `(good run, bad run)` in datagrams: 1 % in bursts of 2 is (198, 2),
/// and 2 / (198 + 2) = 1 %.
pub fn gilbert_elliott_runs(loss: f64, burst: f64) -> (f64, f64) {
    (burst * (1.0 - loss) / loss, burst)
}

/// The `str0m-netem` configuration of one checked [`Impairment`].
///
/// Loss: none at 0, every datagram at 1, independent draws when
/// `loss_burst` is 1, else Gilbert-Elliott with [`gilbert_elliott_runs`].
/// Rate: a datagram of `s` bytes occupies the link for `s · 8 / (rate_mbps · 10⁶)`
/// seconds; datagram `i`, arriving at `aᵢ` with delay `dᵢ`, leaves at
/// `Lᵢ = max(aᵢ + dᵢ, Lᵢ₋₁ + sᵢ₋₁ · 8 / (rate_mbps · 10⁶))`. It is dropped on
/// arrival when `held + s > queue_bytes` ([`Impairment::queue_bytes`]), where
/// `held` counts the bytes accepted and not yet delivered, those waiting for the
/// rate and those on the delay line alike. Jitter does not reorder datagrams: a
/// datagram never leaves before the one accepted before it, unless
/// `reorder_every` picks it to overtake.
pub fn netem_config(imp: &Impairment, seed: u64) -> NetemConfig {
    let loss: LossModel = if imp.loss == 0.0 {
        LossModel::None
    } else if imp.loss >= 1.0 || imp.loss_burst <= 1.0 {
        RandomLoss::new(Probability(imp.loss as f32)).into()
    } else {
        let (good, bad) = gilbert_elliott_runs(imp.loss, imp.loss_burst);
        GilbertElliot::new()
            .good_duration(good as f32)
            .bad_duration(bad as f32)
            .into()
    };
    let mut config = NetemConfig::new()
        .latency(Duration::from_secs_f64(imp.delay_ms / 1000.0))
        .jitter(Duration::from_secs_f64(imp.jitter_ms / 1000.0))
        .loss(loss)
        .duplicate(Probability(imp.duplicate as f32))
        .seed(seed);
    if imp.reorder_every >= 2 {
        config = config.reorder_gap(imp.reorder_every);
    }
    if let (Some(rate), Some(queue)) = (imp.rate_mbps, imp.queue_bytes()) {
        let queue = i64::try_from(queue).unwrap_or(i64::MAX);
        config = config.link(Bitrate::from(rate * 1e6), DataSize::bytes(queue));
    }
    config
}

/// A path's cut-off switch, for a partition at a moment a test or an operator
/// chooses rather than one a scenario schedules. Clones share the switch.
#[derive(Debug, Clone, Default)]
pub struct PathSwitch(Arc<AtomicBool>);

impl PathSwitch {
    /// Cuts the path: it drops everything, both ways, until [`PathSwitch::heal`].
    pub fn cut(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Heals the path.
    pub fn heal(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    /// Whether the path is cut.
    pub fn is_cut(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// When a path is partitioned: fixed windows and flapping, in time since the
/// relay started, and its [`PathSwitch`]. A partitioned path drops what
/// arrives and what would leave.
#[derive(Debug, Clone, Default)]
pub struct Outages {
    windows: Vec<Window>,
    flaps: Vec<Flap>,
    switch: PathSwitch,
}

impl Outages {
    /// The outages of a path, as its scenario lists them.
    pub fn new(windows: Vec<Window>, flaps: Vec<Flap>) -> Self {
        Self {
            windows,
            flaps,
            switch: PathSwitch::default(),
        }
    }

    /// These outages, and whenever `switch` is cut.
    pub fn with_switch(self, switch: PathSwitch) -> Self {
        Self { switch, ..self }
    }

    /// Whether the path is down `t` after the relay started: cut by its
    /// switch, inside a window (`start_s ≤ t < end_s`), or flapping with
    /// `start_s ≤ t < until_s` and `(t − start_s) mod period_s < down_s`.
    pub fn is_down(&self, t: Duration) -> bool {
        if self.switch.is_cut() {
            return true;
        }
        let t = t.as_secs_f64();
        self.windows.iter().any(|w| w.start_s <= t && t < w.end_s)
            || self
                .flaps
                .iter()
                .any(|f| f.start_s <= t && t < f.until_s && (t - f.start_s) % f.period_s < f.down_s)
    }
}

/// One direction of a path: the netem model plus outages. Time is passed in.
pub struct Direction {
    netem: Netem<Datagram>,
    outages: Outages,
    start: Instant,
}

impl Direction {
    /// A direction with this impairment and these outages, seeded, whose
    /// outage clock starts at `start`.
    pub fn new(imp: &Impairment, outages: Outages, seed: u64, start: Instant) -> Self {
        Self {
            netem: Netem::new(netem_config(imp, seed)),
            outages,
            start,
        }
    }

    /// A datagram arrives at `now`. It is dropped if the path is down, else
    /// the model decides its fate (lost, queued, duplicated).
    pub fn push(&mut self, now: Instant, datagram: Datagram) {
        if self
            .outages
            .is_down(now.saturating_duration_since(self.start))
        {
            tracing::trace!(client = %datagram.client, "outage: dropped on arrival");
            return;
        }
        self.netem.handle_input(Input::Packet(now, datagram));
    }

    /// The datagrams due by `now`, in delivery order. If the path is down at
    /// `now` they are dropped, so call it at [`Direction::next_deadline`].
    pub fn pop_ready(&mut self, now: Instant) -> Vec<Datagram> {
        self.netem.handle_input(Input::Timeout(now));
        let down = self
            .outages
            .is_down(now.saturating_duration_since(self.start));
        let mut ready = Vec::new();
        while let Some(out) = self.netem.poll_output() {
            match out {
                Output::Packet(d) if down => {
                    tracing::trace!(client = %d.client, "outage: dropped on delivery");
                }
                Output::Packet(d) => ready.push(d),
                Output::Timeout(_) => {}
            }
        }
        ready
    }

    /// When the next datagram is due, if any is held; call
    /// [`Direction::pop_ready`] then.
    pub fn next_deadline(&self) -> Option<Instant> {
        (!self.netem.is_empty()).then(|| self.netem.poll_timeout())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> SocketAddr {
        "127.0.0.1:5000".parse().unwrap()
    }

    fn dgram(tag: u8, len: usize) -> Datagram {
        Datagram {
            client: client(),
            bytes: vec![tag; len],
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn tags(ds: &[Datagram]) -> Vec<u8> {
        ds.iter().map(|d| d.bytes[0]).collect()
    }

    #[test]
    fn delay_holds_a_datagram_until_due() {
        let t0 = Instant::now();
        let imp = Impairment {
            delay_ms: 50.0,
            ..Impairment::default()
        };
        let mut dir = Direction::new(&imp, Outages::default(), 1, t0);
        assert_eq!(dir.next_deadline(), None);
        dir.push(t0, dgram(1, 10));
        assert_eq!(dir.next_deadline(), Some(t0 + ms(50)));
        assert!(dir.pop_ready(t0 + ms(49)).is_empty());
        assert_eq!(tags(&dir.pop_ready(t0 + ms(50))), vec![1]);
        assert_eq!(dir.next_deadline(), None);
    }

    #[test]
    fn jitter_stays_within_delay_plus_minus_jitter() {
        let t0 = Instant::now();
        let imp = Impairment {
            delay_ms: 50.0,
            jitter_ms: 10.0,
            ..Impairment::default()
        };
        for seed in 0..50 {
            let mut dir = Direction::new(&imp, Outages::default(), seed, t0);
            dir.push(t0, dgram(1, 10));
            let due = dir.next_deadline().unwrap() - t0;
            assert!(ms(40) <= due && due <= ms(60), "seed {seed}: {due:?}");
        }
    }

    #[test]
    fn rate_and_queue_match_the_hand_calculation() {
        // 1 Mb/s: a 1250-byte datagram occupies the link for 1250 · 8 / 10⁶ s = 10 ms.
        // Delay 20 ms, queue 3000 bytes. Three at t0: the first leaves at 20 ms,
        // the second at 20 + 10 = 30 ms; the third finds 2500 bytes held and
        // 2500 + 1250 > 3000, so it is dropped.
        let t0 = Instant::now();
        let imp = Impairment {
            delay_ms: 20.0,
            rate_mbps: Some(1.0),
            queue_bytes: Some(3_000),
            ..Impairment::default()
        };
        let mut dir = Direction::new(&imp, Outages::default(), 1, t0);
        for tag in 1..=3 {
            dir.push(t0, dgram(tag, 1250));
        }
        assert_eq!(dir.next_deadline(), Some(t0 + ms(20)));
        assert_eq!(tags(&dir.pop_ready(t0 + ms(20))), vec![1]);
        // At 20 ms 1250 bytes are held; a fourth fits (2500 ≤ 3000) and leaves
        // at max(20 + 20, 30 + 10) = 40 ms.
        dir.push(t0 + ms(20), dgram(4, 1250));
        assert_eq!(dir.next_deadline(), Some(t0 + ms(30)));
        assert!(dir.pop_ready(t0 + ms(29)).is_empty());
        assert_eq!(tags(&dir.pop_ready(t0 + ms(30))), vec![2]);
        assert_eq!(dir.next_deadline(), Some(t0 + ms(40)));
        assert_eq!(tags(&dir.pop_ready(t0 + ms(40))), vec![4]);
        assert_eq!(dir.next_deadline(), None);
    }

    #[test]
    fn loss_zero_and_one() {
        let t0 = Instant::now();
        for (loss, expect) in [(0.0, 100), (1.0, 0)] {
            for burst in [1.0, 3.0] {
                let imp = Impairment {
                    loss,
                    loss_burst: burst,
                    ..Impairment::default()
                };
                let mut dir = Direction::new(&imp, Outages::default(), 7, t0);
                for _ in 0..100 {
                    dir.push(t0, dgram(1, 10));
                }
                assert_eq!(dir.pop_ready(t0).len(), expect, "loss {loss} burst {burst}");
            }
        }
    }

    #[test]
    fn gilbert_elliott_runs_match_the_hand_calculation() {
        assert_eq!(gilbert_elliott_runs(0.01, 2.0), (198.0, 2.0));
        let (good, bad) = gilbert_elliott_runs(0.05, 4.0);
        assert!((good - 76.0).abs() < 1e-9, "{good}");
        assert_eq!(bad, 4.0);
    }

    /// Drops `n` datagrams through `imp` and returns (loss fraction, mean burst).
    fn measure_loss(imp: &Impairment, n: usize) -> (f64, f64) {
        let t0 = Instant::now();
        let mut dir = Direction::new(imp, Outages::default(), 42, t0);
        let (mut lost, mut bursts, mut in_burst) = (0usize, 0usize, false);
        for _ in 0..n {
            dir.push(t0, dgram(1, 10));
            if dir.pop_ready(t0).is_empty() {
                lost += 1;
                bursts += usize::from(!in_burst);
                in_burst = true;
            } else {
                in_burst = false;
            }
        }
        (lost as f64 / n as f64, lost as f64 / bursts.max(1) as f64)
    }

    #[test]
    fn bursty_loss_has_the_mean_loss_and_burst_asked_for() {
        let imp = Impairment {
            loss: 0.02,
            loss_burst: 4.0,
            ..Impairment::default()
        };
        let (loss, burst) = measure_loss(&imp, 200_000);
        assert!((0.017..0.023).contains(&loss), "loss {loss}");
        assert!((3.5..4.5).contains(&burst), "burst {burst}");
        let independent = Impairment {
            loss: 0.02,
            ..Impairment::default()
        };
        let (loss, burst) = measure_loss(&independent, 200_000);
        assert!((0.017..0.023).contains(&loss), "loss {loss}");
        assert!(burst < 1.1, "burst {burst}");
    }

    #[test]
    fn duplicate_one_delivers_each_datagram_twice() {
        let t0 = Instant::now();
        let imp = Impairment {
            duplicate: 1.0,
            ..Impairment::default()
        };
        let mut dir = Direction::new(&imp, Outages::default(), 1, t0);
        dir.push(t0, dgram(1, 10));
        dir.push(t0, dgram(2, 10));
        assert_eq!(tags(&dir.pop_ready(t0)), vec![1, 1, 2, 2]);
    }

    #[test]
    fn reorder_every_3_lets_the_third_overtake_the_second() {
        let t0 = Instant::now();
        let imp = Impairment {
            delay_ms: 10.0,
            reorder_every: 3,
            ..Impairment::default()
        };
        let mut dir = Direction::new(&imp, Outages::default(), 1, t0);
        for tag in 1..=3 {
            dir.push(t0, dgram(tag, 10));
        }
        assert_eq!(tags(&dir.pop_ready(t0 + ms(10))), vec![1, 3, 2]);
    }

    #[test]
    fn outage_windows_and_flapping() {
        let o = Outages::new(
            vec![Window {
                start_s: 10.0,
                end_s: 20.0,
            }],
            vec![Flap {
                start_s: 100.0,
                period_s: 10.0,
                down_s: 3.0,
                until_s: 130.0,
            }],
        );
        let down = |s: f64| o.is_down(Duration::from_secs_f64(s));
        assert!(!down(9.999) && down(10.0) && down(19.999) && !down(20.0));
        // Flapping: down 100–103, 110–113, 120–123; up from 130 on.
        assert!(!down(99.0) && down(100.0) && down(102.9) && !down(103.0));
        assert!(down(111.0) && !down(115.0) && down(122.0) && !down(130.5));
    }

    #[test]
    fn an_outage_drops_on_arrival_and_on_delivery() {
        let t0 = Instant::now();
        let imp = Impairment {
            delay_ms: 100.0,
            ..Impairment::default()
        };
        let window = |start_s, end_s| Outages::new(vec![Window { start_s, end_s }], vec![]);
        // Sent during the outage (0–1 s): dropped; sent after it: delivered.
        let mut dir = Direction::new(&imp, window(0.0, 1.0), 1, t0);
        dir.push(t0 + ms(500), dgram(1, 10));
        assert!(dir.pop_ready(t0 + ms(600)).is_empty());
        dir.push(t0 + ms(1000), dgram(2, 10));
        assert_eq!(tags(&dir.pop_ready(t0 + ms(1100))), vec![2]);
        // Sent before the outage (0.5–1 s) but due inside it: dropped too.
        let mut dir = Direction::new(&imp, window(0.5, 1.0), 1, t0);
        dir.push(t0 + ms(450), dgram(3, 10));
        assert!(dir.pop_ready(t0 + ms(550)).is_empty());
        assert_eq!(dir.next_deadline(), None);
    }

    #[test]
    fn a_cut_switch_drops_until_healed() {
        let t0 = Instant::now();
        let switch = PathSwitch::default();
        let outages = Outages::default().with_switch(switch.clone());
        let mut dir = Direction::new(&Impairment::default(), outages, 1, t0);
        switch.cut();
        dir.push(t0, dgram(1, 10));
        assert!(dir.pop_ready(t0).is_empty(), "dropped while cut");
        switch.heal();
        dir.push(t0 + ms(1), dgram(2, 10));
        assert_eq!(tags(&dir.pop_ready(t0 + ms(1))), [2]);
    }
}
