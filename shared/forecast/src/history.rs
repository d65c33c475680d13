//! The slots before a forecast start, arranged as whole days: what every method reads.

/// Slot means in time order, ending with the slot just before the forecast start;
/// the length is a whole number of days and leading empty days are dropped.
#[derive(Debug, Clone)]
pub(crate) struct History {
    values: Vec<Option<f64>>,
    slots_per_day: usize,
}

impl History {
    /// Wraps `values` (whose length is a multiple of `slots_per_day`).
    pub(crate) fn new(mut values: Vec<Option<f64>>, slots_per_day: usize) -> Self {
        let first = values
            .iter()
            .position(Option::is_some)
            .unwrap_or(values.len());
        values.drain(..first / slots_per_day * slots_per_day);
        Self {
            values,
            slots_per_day,
        }
    }

    /// All slots, oldest first.
    pub(crate) fn values(&self) -> &[Option<f64>] {
        &self.values
    }

    pub(crate) fn slots_per_day(&self) -> usize {
        self.slots_per_day
    }

    /// Whole days covered (rows of the day matrix).
    pub(crate) fn days(&self) -> usize {
        self.values.len() / self.slots_per_day
    }

    /// The value of slot `phase` on day `day` (0 is the oldest day).
    pub(crate) fn at(&self, day: usize, phase: usize) -> Option<f64> {
        self.values[day * self.slots_per_day + phase]
    }

    /// Observed slots divided by slots per day: days' worth of data.
    pub(crate) fn observed_days(&self) -> f64 {
        self.values.iter().flatten().count() as f64 / self.slots_per_day as f64
    }

    /// Index and value of the most recent observed slot.
    pub(crate) fn last_observed(&self) -> Option<(usize, f64)> {
        self.values
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, v)| v.map(|v| (i, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_leading_empty_days_only() {
        let h = History::new(vec![None, None, None, Some(1.0), None, Some(2.0)], 2);
        assert_eq!(h.days(), 2);
        assert_eq!(h.at(0, 1), Some(1.0));
        assert_eq!(h.observed_days(), 1.0);
        assert_eq!(h.last_observed(), Some((3, 2.0)));
    }
}
