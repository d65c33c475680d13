//! Prometheus exposition shared by both daemons, so that the coordinator's
//! `/metrics` and the edge's status port speak the same format: a registry
//! that already holds the `process_*` family (read from `/proc`) and
//! `tidemill_build_info`, and its text encoding (format 0.0.4).

pub use prometheus;
use prometheus::{Encoder, Histogram, HistogramOpts, IntGauge, Opts, Registry, TextEncoder};

/// The `Content-Type` of a text exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Latency buckets in seconds, from half a millisecond to 10 s: wide enough
/// for a store write on a busy disk and a round over ten thousand nodes.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A registry holding the process metrics and `tidemill_build_info` for
/// `version`. Names are fixed at compile time, so registering them cannot
/// collide.
pub fn registry(version: &str) -> Registry {
    let registry = Registry::new();
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("the process family is registered once");
    let info = IntGauge::with_opts(
        Opts::new(
            "tidemill_build_info",
            "The running build: always 1, with the version as a label.",
        )
        .const_label("version", version),
    )
    .expect("a valid metric name");
    info.set(1);
    register(&registry, info);
    registry
}

/// Registers `metric` in `registry` and hands it back, for struct
/// initialisers. Every caller passes a fixed, distinct name.
pub fn register<M>(registry: &Registry, metric: M) -> M
where
    M: prometheus::core::Collector + Clone + 'static,
{
    registry
        .register(Box::new(metric.clone()))
        .expect("fixed, distinct metric names");
    metric
}

/// A histogram of latencies in seconds with [`LATENCY_BUCKETS`], registered.
pub fn latency(registry: &Registry, name: &str, help: &str) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
    register(
        registry,
        Histogram::with_opts(opts).expect("a valid metric name"),
    )
}

/// The text exposition of everything in `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = Vec::new();
    // Encoding into a Vec cannot fail for valid families, and every family
    // here was validated when it was registered.
    TextEncoder::new()
        .encode(&registry.gather(), &mut out)
        .expect("text encoding into memory");
    String::from_utf8(out).expect("the text encoder writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_exposes_process_metrics_and_the_build() {
        let registry = registry("1.2.3");
        let h = latency(&registry, "tidemill_test_seconds", "A test.");
        h.observe(0.003);
        let text = encode(&registry);
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
            "tidemill_build_info{version=\"1.2.3\"} 1",
            "tidemill_test_seconds_bucket{le=\"0.005\"} 1",
            "tidemill_test_seconds_count 1",
        ] {
            assert!(text.contains(family), "{family} missing from:\n{text}");
        }
    }
}
