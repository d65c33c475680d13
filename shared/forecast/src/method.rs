//! The forecasting methods: three baselines and tidemill's own model.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A forecasting method, named as on the command line and in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The same slot on the most recent earlier day with data: the reference
    /// every other method must beat (the MASE denominator).
    SameSlotYesterday,
    /// The same slot on the most recent earlier week with data.
    SameSlotLastWeek,
    /// The mean slot-of-day profile over the kept history.
    MeanProfile,
    /// tidemill's model: a daily profile (unless no cycle is found) blended with
    /// same-slot-yesterday by their recent one-day-ahead errors, plus a residual
    /// persistence term that fades with lead time.
    Tidemill,
}

impl Method {
    /// Every method, baselines first.
    pub const ALL: [Method; 4] = [
        Method::SameSlotYesterday,
        Method::SameSlotLastWeek,
        Method::MeanProfile,
        Method::Tidemill,
    ];

    /// The method's name, as accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            Method::SameSlotYesterday => "same-slot-yesterday",
            Method::SameSlotLastWeek => "same-slot-last-week",
            Method::MeanProfile => "mean-profile",
            Method::Tidemill => "tidemill",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A method name that is not one of [`Method::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown forecast method `{0}`: use same-slot-yesterday, same-slot-last-week, mean-profile or tidemill"
)]
pub struct UnknownMethod(pub String);

impl FromStr for Method {
    type Err = UnknownMethod;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownMethod(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for m in Method::ALL {
            assert_eq!(m.name().parse::<Method>(), Ok(m));
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{m}\""));
        }
        assert!(
            "arima"
                .parse::<Method>()
                .unwrap_err()
                .to_string()
                .contains("arima")
        );
    }
}
