//! Where throughput numbers came from ([`TableSource`]), and the one-line
//! summary of a class's sources that reports show ([`ClassSources`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Where one model's numbers on one class came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TableSource {
    /// Measured: an ElasticFlow-format CSV.
    ElasticFlow {
        /// The file (or the name given for inline text).
        file: String,
    },
    /// Measured: a Sia placement profile.
    Sia {
        /// The profile directory.
        dir: String,
        /// The cluster, e.g. `aws` for T4.
        cluster: String,
    },
    /// Estimated: `ratio` × class `from`'s table
    /// ([`ThroughputTables::insert_scaled`](crate::ThroughputTables::insert_scaled)).
    Lambda {
        /// The class scaled.
        from: String,
        /// This class's speed as a share of `from`'s.
        ratio: f64,
        /// Where the ratio comes from.
        source: String,
    },
    /// Estimated by [`ThroughputTables::fill_missing`](crate::ThroughputTables::fill_missing):
    /// `ratio` × class `from`'s table.
    MedianRatio {
        /// The class scaled.
        from: String,
        /// The median single-device samples/s ratio.
        ratio: f64,
        /// Models measured on both classes that the median is over.
        models: usize,
    },
    /// Given directly, e.g. a job's own rate.
    Given {
        /// Who gave it.
        by: String,
    },
    /// One job's table on the class it runs on, scaled to the rate measured
    /// from its own progress reports: `ratio` × the table it was planned by.
    JobMeasured {
        /// The measured rate over the predicted one.
        ratio: f64,
    },
}

impl TableSource {
    /// True when the numbers are an estimate rather than a measurement of this class.
    pub fn is_estimate(&self) -> bool {
        matches!(
            self,
            TableSource::Lambda { .. } | TableSource::MedianRatio { .. }
        )
    }

    /// The heading this source is grouped under in a class summary, and this model's entry.
    fn summary(&self, model: &str) -> (String, String) {
        match self {
            TableSource::ElasticFlow { file } => {
                let dir = Path::new(file)
                    .parent()
                    .map_or(String::new(), |d| d.display().to_string());
                (
                    format!("measured, ElasticFlow-format dir {dir}"),
                    model.to_string(),
                )
            }
            TableSource::Sia { dir, cluster } => (
                format!("measured, Sia profile {dir} cluster {cluster}"),
                model.to_string(),
            ),
            TableSource::Lambda {
                from,
                ratio,
                source,
            } => (
                format!("estimated, lambda × {from} per model"),
                format!("{model} {ratio} ({source})"),
            ),
            TableSource::MedianRatio { .. } => (
                format!("estimated, {}", self.estimate_text().unwrap_or_default()),
                model.to_string(),
            ),
            TableSource::Given { by } => (format!("given by {by}"), model.to_string()),
            TableSource::JobMeasured { ratio } => (
                "measured from the job's progress reports".to_string(),
                format!("{model} ({ratio:.3} × its planned rate)"),
            ),
        }
    }

    /// Why the numbers are an estimate, if they are.
    pub(crate) fn estimate_text(&self) -> Option<String> {
        match self {
            TableSource::Lambda {
                from,
                ratio,
                source,
            } => Some(format!("{from} table × {ratio} (source: {source})")),
            TableSource::MedianRatio {
                from,
                ratio,
                models,
            } => Some(format!(
                "{from} table × {ratio:.4}, the median single-device samples/s ratio to {from} over {models} model(s) measured in both"
            )),
            _ => None,
        }
    }
}

/// Where one class's numbers came from, model by model; displays as one line
/// that groups models by source.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ClassSources(pub BTreeMap<String, TableSource>);

impl fmt::Display for ClassSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for (model, source) in &self.0 {
            let (heading, entry) = source.summary(model);
            match groups.iter_mut().find(|g| g.0 == heading) {
                Some(g) => g.1.push(entry),
                None => groups.push((heading, vec![entry])),
            }
        }
        let lines: Vec<String> = groups
            .into_iter()
            .map(|(h, entries)| format!("{h}: {}", entries.join(", ")))
            .collect();
        f.write_str(&lines.join("; "))
    }
}
