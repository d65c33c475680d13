//! The grid a sweep runs: `--vary KEY=V1,V2,...` flags, their cartesian
//! product, and how one point changes the topology or the run's flags.
//!
//! Keys:
//! - `edge.nodes`, `edge.devices`, `edge.idle_threshold_pct`: set on every
//!   `[[edge]]` group (boxes per group, devices per box, idle threshold);
//! - `cloud.nodes`, `cloud.gpus_per_node`: set on every `[[cloud]]` group;
//! - `arrival_scale`: multiplies the jobs' inter-arrival times (as EdgeFlow's
//!   sensitivity study does; below 1 the load is heavier).

use std::path::Path;

use thiserror::Error;

use crate::simulate::topology::{Topology, TopologyError};

/// A `--vary` flag that cannot be used.
#[derive(Debug, Error)]
pub enum GridError {
    /// Not `KEY=V1,V2,...`.
    #[error("--vary {0}: expected KEY=V1,V2,..., e.g. --vary edge.nodes=2,4,8")]
    Syntax(String),
    /// A key the sweep does not know.
    #[error("--vary {0}: unknown key; use one of {KEYS}")]
    Key(String),
    /// A value that is not a number the key takes.
    #[error("--vary {key}: `{value}` {rule}")]
    Value {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// The same key twice.
    #[error("--vary {0} is given twice; give each key once with all its values")]
    Twice(String),
}

/// The keys a sweep can vary.
pub const KEYS: &str = "edge.nodes, edge.devices, edge.idle_threshold_pct, cloud.nodes, cloud.gpus_per_node, arrival_scale";

/// What a key sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// Boxes per `[[edge]]` group.
    EdgeNodes,
    /// Devices per edge box.
    EdgeDevices,
    /// Idle threshold of every edge box, percent.
    EdgeIdleThreshold,
    /// Nodes per `[[cloud]]` group.
    CloudNodes,
    /// GPUs per cloud node.
    CloudGpusPerNode,
    /// The jobs' inter-arrival time multiplier.
    ArrivalScale,
}

impl Key {
    fn parse(name: &str) -> Option<Key> {
        Some(match name {
            "edge.nodes" => Key::EdgeNodes,
            "edge.devices" => Key::EdgeDevices,
            "edge.idle_threshold_pct" => Key::EdgeIdleThreshold,
            "cloud.nodes" => Key::CloudNodes,
            "cloud.gpus_per_node" => Key::CloudGpusPerNode,
            "arrival_scale" => Key::ArrivalScale,
            _ => return None,
        })
    }

    /// The key as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Key::EdgeNodes => "edge.nodes",
            Key::EdgeDevices => "edge.devices",
            Key::EdgeIdleThreshold => "edge.idle_threshold_pct",
            Key::CloudNodes => "cloud.nodes",
            Key::CloudGpusPerNode => "cloud.gpus_per_node",
            Key::ArrivalScale => "arrival_scale",
        }
    }

    /// True when the key takes whole numbers.
    fn integral(self) -> bool {
        !matches!(self, Key::EdgeIdleThreshold | Key::ArrivalScale)
    }

    /// The value the topology has for the key (the first group's), if any;
    /// `arrival_scale` is 1 unless the flag says otherwise.
    pub fn base(self, t: &Topology, arrival_scale: Option<f64>) -> Option<f64> {
        let e = t.edge.first();
        let c = t.cloud.first();
        match self {
            Key::EdgeNodes => e.map(|e| f64::from(e.nodes)),
            Key::EdgeDevices => e.map(|e| f64::from(e.devices)),
            Key::EdgeIdleThreshold => e.map(|e| e.idle_threshold_pct),
            Key::CloudNodes => c.map(|c| f64::from(c.nodes)),
            Key::CloudGpusPerNode => c.map(|c| f64::from(c.gpus_per_node)),
            Key::ArrivalScale => Some(arrival_scale.unwrap_or(1.0)),
        }
    }
}

/// One varied key and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The key.
    pub key: Key,
    /// Its values, in the order given.
    pub values: Vec<f64>,
}

/// Parses `--vary` flags into axes.
pub fn parse_axes(flags: &[String]) -> Result<Vec<Axis>, GridError> {
    let mut axes: Vec<Axis> = Vec::new();
    for flag in flags {
        let (name, list) = flag
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| GridError::Syntax(flag.clone()))?;
        let key = Key::parse(name.trim()).ok_or_else(|| GridError::Key(name.to_string()))?;
        if axes.iter().any(|a| a.key == key) {
            return Err(GridError::Twice(name.to_string()));
        }
        let mut values = Vec::new();
        for v in list.split(',') {
            let bad = |rule| GridError::Value {
                key: name.to_string(),
                value: v.to_string(),
                rule,
            };
            let x: f64 = v.trim().parse().map_err(|_| bad("is not a number"))?;
            if !x.is_finite() || x < 0.0 {
                return Err(bad("must be a non-negative number"));
            }
            if key.integral() && x.fract() != 0.0 {
                return Err(bad("must be a whole number"));
            }
            if key == Key::ArrivalScale && x == 0.0 {
                return Err(bad("must be positive (1 keeps the trace's arrivals)"));
            }
            if matches!(
                key,
                Key::CloudNodes | Key::CloudGpusPerNode | Key::EdgeDevices
            ) && x == 0.0
            {
                return Err(bad("must be at least 1"));
            }
            if key == Key::EdgeIdleThreshold && x > 100.0 {
                return Err(bad("must be a percentage, 0 to 100"));
            }
            values.push(x);
        }
        axes.push(Axis { key, values });
    }
    Ok(axes)
}

/// One point of the grid: a value per axis, in the axes' order.
pub type Point = Vec<f64>;

/// The cartesian product of the axes, the last axis varying fastest; one
/// empty point when there is no axis.
pub fn points(axes: &[Axis]) -> Vec<Point> {
    let mut out: Vec<Point> = vec![Vec::new()];
    for a in axes {
        out = out
            .into_iter()
            .flat_map(|p| {
                a.values.iter().map(move |&v| {
                    let mut q = p.clone();
                    q.push(v);
                    q
                })
            })
            .collect();
    }
    out
}

/// Sets the point's topology keys on `t`; `arrival_scale` is the caller's.
pub fn apply(
    axes: &[Axis],
    point: &[f64],
    t: &mut Topology,
    path: &Path,
) -> Result<(), TopologyError> {
    for (a, &v) in axes.iter().zip(point) {
        let none = |what: &'static str| TopologyError::Invalid {
            path: path.to_path_buf(),
            key: a.key.name().to_string(),
            value: v.to_string(),
            rule: what,
        };
        match a.key {
            Key::EdgeNodes | Key::EdgeDevices | Key::EdgeIdleThreshold if t.edge.is_empty() => {
                return Err(none("the topology has no [[edge]] group to vary"));
            }
            Key::CloudNodes | Key::CloudGpusPerNode if t.cloud.is_empty() => {
                return Err(none("the topology has no [[cloud]] group to vary"));
            }
            Key::EdgeNodes => t.edge.iter_mut().for_each(|e| e.nodes = v as u32),
            Key::EdgeDevices => t.edge.iter_mut().for_each(|e| e.devices = v as u32),
            Key::EdgeIdleThreshold => t.edge.iter_mut().for_each(|e| e.idle_threshold_pct = v),
            Key::CloudNodes => t.cloud.iter_mut().for_each(|c| c.nodes = v as u32),
            Key::CloudGpusPerNode => t.cloud.iter_mut().for_each(|c| c.gpus_per_node = v as u32),
            Key::ArrivalScale => {}
        }
    }
    Ok(())
}

/// The point's `arrival_scale`, if it varies it.
pub fn arrival_scale(axes: &[Axis], point: &[f64]) -> Option<f64> {
    axes.iter()
        .zip(point)
        .find(|(a, _)| a.key == Key::ArrivalScale)
        .map(|(_, &v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_grid_is_the_cartesian_product() {
        let axes = parse_axes(&flags(&["edge.nodes=2,4,8", "arrival_scale=0.5,1"])).unwrap();
        let p = points(&axes);
        assert_eq!(p.len(), 6);
        assert_eq!(p[0], vec![2.0, 0.5]);
        assert_eq!(p[1], vec![2.0, 1.0]);
        assert_eq!(p[5], vec![8.0, 1.0]);
        assert_eq!(arrival_scale(&axes, &p[1]), Some(1.0));
        assert_eq!(points(&[]), vec![Vec::<f64>::new()]);
    }

    #[test]
    fn bad_flags_name_the_problem_and_the_fix() {
        let e = parse_axes(&flags(&["edge.boxes=1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown key") && e.contains("edge.nodes"), "{e}");
        let e = parse_axes(&flags(&["edge.nodes=2,x"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`x` is not a number"), "{e}");
        let e = parse_axes(&flags(&["cloud.nodes=1.5"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("whole number"), "{e}");
        let e = parse_axes(&flags(&["arrival_scale=0"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("positive"), "{e}");
        let e = parse_axes(&flags(&["edge.nodes"])).unwrap_err().to_string();
        assert!(e.contains("KEY=V1,V2"), "{e}");
        let e = parse_axes(&flags(&["edge.nodes=1", "edge.nodes=2"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn a_point_sets_every_group() {
        let text = r#"
[[cloud]]
name = "a"
nodes = 2
gpus_per_node = 8
class = "A100"
price_per_gpu_hour = 3.0
[[cloud]]
name = "b"
nodes = 1
gpus_per_node = 8
class = "A100"
price_per_gpu_hour = 3.0
[[edge]]
name = "e"
nodes = 32
class = "T4"
idle_threshold_pct = 30.0
[links]
edge_edge = { bandwidth_mbps = 1000, latency_ms = 5 }
cloud_edge = { bandwidth_mbps = 100, latency_ms = 30 }
cloud_cloud = { bandwidth_mbps = 10000, latency_ms = 1 }
"#;
        let path = Path::new("t.toml");
        let mut t = Topology::parse(path, text).unwrap();
        let axes = parse_axes(&flags(&["cloud.nodes=4", "edge.nodes=7"])).unwrap();
        assert_eq!(axes[0].key.base(&t, None), Some(2.0));
        apply(&axes, &[4.0, 7.0], &mut t, path).unwrap();
        assert_eq!(
            (t.cloud[0].nodes, t.cloud[1].nodes, t.edge[0].nodes),
            (4, 4, 7)
        );
        t.edge.clear();
        let e = apply(&axes, &[4.0, 7.0], &mut t, path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no [[edge]] group"), "{e}");
    }
}
