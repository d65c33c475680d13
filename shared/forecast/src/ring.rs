//! The per-series state: a fixed-size ring of per-slot sums, so an update is O(1)
//! amortised and memory stays bounded whatever the sample rate.

/// Per-slot sums and counts over the last `capacity` slots.
///
/// Slot `a` (an absolute index, `t_ms.div_euclid(slot_len_ms)`) lives at ring
/// position `a mod capacity`; `newest` is the highest slot seen so far.
#[derive(Debug, Clone)]
pub(crate) struct SlotRing {
    slot_len_ms: i64,
    sums: Vec<f64>,
    counts: Vec<u32>,
    newest: Option<i64>,
}

/// The sample fell before the oldest slot the ring keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stale {
    /// Start of the oldest slot still kept, Unix ms.
    pub(crate) oldest_kept_ms: i64,
}

impl SlotRing {
    pub(crate) fn new(slot_len_ms: i64, capacity: usize) -> Self {
        Self {
            slot_len_ms,
            sums: vec![0.0; capacity],
            counts: vec![0; capacity],
            newest: None,
        }
    }

    fn capacity(&self) -> i64 {
        self.sums.len() as i64
    }

    fn pos(&self, slot: i64) -> usize {
        slot.rem_euclid(self.capacity()) as usize
    }

    /// Absolute slot index of a Unix-ms time.
    pub(crate) fn slot_of(&self, t_ms: i64) -> i64 {
        t_ms.div_euclid(self.slot_len_ms)
    }

    /// Adds one sample. Samples may arrive in any order; a newer slot clears the
    /// slots it overtakes (at most `capacity` of them).
    pub(crate) fn add(&mut self, t_ms: i64, value: f64) -> Result<(), Stale> {
        let slot = self.slot_of(t_ms);
        match self.newest {
            Some(newest) if slot > newest => {
                let first = (newest + 1).max(slot - self.capacity() + 1);
                for s in first..=slot {
                    let p = self.pos(s);
                    self.sums[p] = 0.0;
                    self.counts[p] = 0;
                }
                self.newest = Some(slot);
            }
            Some(newest) if slot <= newest - self.capacity() => {
                return Err(Stale {
                    oldest_kept_ms: (newest - self.capacity() + 1) * self.slot_len_ms,
                });
            }
            Some(_) => {}
            None => self.newest = Some(slot),
        }
        let p = self.pos(slot);
        self.sums[p] += value;
        self.counts[p] += 1;
        Ok(())
    }

    /// Mean of the samples in `slot`, or `None` when it holds none or is not kept.
    fn mean(&self, slot: i64) -> Option<f64> {
        let newest = self.newest?;
        if slot > newest || slot <= newest - self.capacity() {
            return None;
        }
        let p = self.pos(slot);
        (self.counts[p] > 0).then(|| self.sums[p] / f64::from(self.counts[p]))
    }

    /// Whether `window(end, len, max_hold)` would hold any value: a slot with
    /// samples in `[end − len − max_hold, end)`. Scans from the newest slot
    /// back, so a live series answers at once.
    pub(crate) fn any_in_window(&self, end: i64, len: usize, max_hold: usize) -> bool {
        let Some(newest) = self.newest else {
            return false;
        };
        let from = (end - len as i64 - max_hold as i64).max(newest - self.capacity() + 1);
        (from..end.min(newest + 1))
            .rev()
            .any(|s| self.mean(s).is_some())
    }

    /// The `len` slots that end just before slot `end` (oldest first). An empty
    /// slot repeats the last slot mean seen at most `max_hold` slots earlier, so
    /// coarse samples fill the slot grid; longer gaps stay `None`.
    pub(crate) fn window(&self, end: i64, len: usize, max_hold: usize) -> Vec<Option<f64>> {
        let start = end - len as i64;
        let mut held: Option<(i64, f64)> = None;
        for s in (start - max_hold as i64)..start {
            if let Some(v) = self.mean(s) {
                held = Some((s, v));
            }
        }
        let Some(newest) = self.newest else {
            return vec![None; len];
        };
        let kept = (newest - self.capacity() + 1)..=newest;
        // Ring positions advance with the slot; one division for the window.
        let mut p = self.pos(start);
        let cap = self.sums.len();
        (start..end)
            .map(|s| {
                let (sum, count) = (self.sums[p], self.counts[p]);
                p = if p + 1 == cap { 0 } else { p + 1 };
                if kept.contains(&s) && count > 0 {
                    let v = sum / f64::from(count);
                    held = Some((s, v));
                    Some(v)
                } else {
                    held.filter(|(at, _)| s - at <= max_hold as i64)
                        .map(|(_, v)| v)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_per_slot_in_any_order() {
        let mut r = SlotRing::new(1_000, 4);
        for (t, v) in [(2_500, 4.0), (0, 1.0), (2_000, 2.0), (999, 3.0)] {
            r.add(t, v).unwrap();
        }
        assert_eq!(r.window(3, 3, 0), vec![Some(2.0), None, Some(3.0)]);
    }

    #[test]
    fn any_in_window_agrees_with_the_window() {
        let mut r = SlotRing::new(1_000, 8);
        assert!(!r.any_in_window(5, 3, 1));
        r.add(2_000, 1.0).unwrap();
        r.add(9_000, 2.0).unwrap();
        for end in 0..14 {
            for len in 1..5 {
                for hold in 0..3 {
                    let w = r.window(end, len, hold);
                    assert_eq!(
                        r.any_in_window(end, len, hold),
                        w.iter().any(Option::is_some),
                        "end {end} len {len} hold {hold}: {w:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn overtaking_clears_and_old_samples_are_stale() {
        let mut r = SlotRing::new(1_000, 4);
        r.add(0, 1.0).unwrap();
        r.add(5_000, 5.0).unwrap();
        assert_eq!(r.window(6, 4, 0), vec![None, None, None, Some(5.0)]);
        assert_eq!(
            r.add(1_500, 9.0),
            Err(Stale {
                oldest_kept_ms: 2_000
            })
        );
        r.add(2_000, 2.0).unwrap();
        assert_eq!(r.window(6, 4, 0), vec![Some(2.0), None, None, Some(5.0)]);
    }

    #[test]
    fn hold_fills_short_gaps_only() {
        let mut r = SlotRing::new(1_000, 16);
        r.add(0, 7.0).unwrap();
        r.add(5_000, 1.0).unwrap();
        assert_eq!(
            r.window(6, 6, 2),
            vec![Some(7.0), Some(7.0), Some(7.0), None, None, Some(1.0)]
        );
    }

    #[test]
    fn negative_times_use_floor_slots() {
        let mut r = SlotRing::new(1_000, 4);
        r.add(-1, 3.0).unwrap();
        assert_eq!(r.slot_of(-1), -1);
        assert_eq!(r.window(0, 1, 0), vec![Some(3.0)]);
    }
}
