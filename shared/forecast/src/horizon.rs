//! Horizon buckets: forecasts are selected, calibrated and scored per range of
//! lead time, since a 1-hour-ahead error says little about a 40-hour-ahead one.

use serde::{Deserialize, Serialize};

/// A range of lead times, measured from the forecast start to a slot's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HorizonBucket {
    /// Slots starting 0 to 6 h ahead: the recent level still tells.
    #[serde(rename = "0-6h")]
    Near,
    /// 6 to 24 h ahead: the rest of today and tonight.
    #[serde(rename = "6-24h")]
    Day,
    /// 24 to 48 h ahead: tomorrow, which the 48-hour plans also cover.
    #[serde(rename = "24-48h")]
    NextDay,
}

impl HorizonBucket {
    /// Every bucket, nearest first.
    pub const ALL: [HorizonBucket; 3] = [
        HorizonBucket::Near,
        HorizonBucket::Day,
        HorizonBucket::NextDay,
    ];

    /// The bucket of a slot that starts `lead_s` seconds after the forecast
    /// start: [0, 6 h) → near, [6 h, 24 h) → day, 24 h and later → next day.
    pub fn of_lead_s(lead_s: u64) -> Self {
        match lead_s {
            0..21_600 => HorizonBucket::Near,
            21_600..86_400 => HorizonBucket::Day,
            _ => HorizonBucket::NextDay,
        }
    }

    /// The bucket of lead slot `lead` (0 is the first) with slots of `slot_len_s` seconds.
    pub fn of_slot(lead: usize, slot_len_s: u32) -> Self {
        Self::of_lead_s(lead as u64 * u64::from(slot_len_s))
    }

    /// Index in [`HorizonBucket::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name, as in JSON and the report: `0-6h`, `6-24h` or `24-48h`.
    pub fn name(self) -> &'static str {
        match self {
            HorizonBucket::Near => "0-6h",
            HorizonBucket::Day => "6-24h",
            HorizonBucket::NextDay => "24-48h",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_by_hand() {
        // 15-minute slots: lead 23 starts at 5 h 45 min, lead 24 at 6 h.
        assert_eq!(HorizonBucket::of_slot(23, 900), HorizonBucket::Near);
        assert_eq!(HorizonBucket::of_slot(24, 900), HorizonBucket::Day);
        assert_eq!(HorizonBucket::of_slot(95, 900), HorizonBucket::Day);
        assert_eq!(HorizonBucket::of_slot(96, 900), HorizonBucket::NextDay);
        assert_eq!(HorizonBucket::of_slot(191, 900), HorizonBucket::NextDay);
        for (i, b) in HorizonBucket::ALL.iter().enumerate() {
            assert_eq!(b.index(), i);
            assert_eq!(
                serde_json::to_string(b).unwrap(),
                format!("\"{}\"", b.name())
            );
        }
    }
}
