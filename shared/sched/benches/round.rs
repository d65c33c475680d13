//! One full scheduling round: 10 000 nodes × 2 000 queued jobs (target ≤ 100 ms),
//! and the curve from 100 to 10 000 nodes at the same 5 : 1 node-to-job ratio.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tidemill_sched::*;

const H: i64 = 3_600_000;
const NOW: i64 = 1_700_000_000_000 / H * H + 18 * H;

/// A deterministic xorshift stream, so every run schedules the same world.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn tables() -> ThroughputTables {
    let mut t = ThroughputTables::default();
    let a100 =
        "global_batch_size,1,2,4,8,16\n64,6.8,11.8,18.3,21.3,21.5\n128,3.7,6.6,11.2,16.5,20.2\n";
    let t4 = "global_batch_size,1,2,4,8,16\n64,1.0,1.9,3.4,5.0,5.5\n";
    for (class, text) in [("A100", a100), ("T4", t4)] {
        for model in ["resnet50", "bert", "vgg16"] {
            t.insert_csv(class, model, "bench", text)
                .expect("inline table parses");
        }
    }
    t
}

fn world(n_nodes: usize, n_jobs: usize) -> WorldSnapshot {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let nodes = (0..n_nodes)
        .map(|i| {
            if i % 5 == 0 {
                NodeSpec {
                    id: format!("cloud-{i}"),
                    class: "A100".into(),
                    devices: 8,
                    memory_per_device_bytes: 80 << 30,
                    online: true,
                    kind: NodeKind::Cloud {
                        price_per_gpu_hour: [2.5, 3.0][i % 2],
                    },
                }
            } else {
                let start = NOW + (2 + rng.next(6) as i64) * H + rng.next(60) as i64 * 60_000;
                let len = (4 + rng.next(6) as i64) * H;
                NodeSpec {
                    id: format!("edge-{i}"),
                    class: "T4".into(),
                    devices: 1 + rng.next(4) as u32,
                    memory_per_device_bytes: 16 << 30,
                    online: true,
                    kind: NodeKind::Edge(EdgeAvailability {
                        windows: vec![
                            Window {
                                start_ms: start,
                                end_ms: start + len,
                                confidence: 0.95,
                            },
                            Window {
                                start_ms: start + 24 * H,
                                end_ms: start + 24 * H + len,
                                confidence: 0.95,
                            },
                        ],
                        likely: Vec::new(),
                        idle_since_ms: None,
                        util_now_pct: Some(70.0),
                        idle_threshold_pct: 30.0,
                    }),
                }
            }
        })
        .collect();
    let jobs = (0..n_jobs as u64)
        .map(|id| {
            let slo = rng.next(10) < 6;
            JobState {
                spec: JobSpec {
                    id,
                    class: if slo {
                        JobClass::Slo
                    } else {
                        JobClass::BestEffort
                    },
                    submitted_ms: NOW - rng.next(3_600_000) as i64,
                    deadline_ms: NOW + (6 + rng.next(30) as i64) * H,
                    iterations: 1_000.0 + rng.next(80_000) as f64,
                    global_batch: [64, 128][rng.next(2) as usize],
                    model: ["resnet50", "bert", "vgg16"][rng.next(3) as usize].into(),
                    model_bytes: 100_000_000,
                    dataset_bytes: rng.next(5) * 1_000_000_000,
                    dataset_site: DataSite::Cloud,
                    min_workers: 1,
                    max_workers: 1 + rng.next(8) as u32,
                    memory_per_worker_bytes: 8 << 30,
                    checkpoint_bytes: 200_000_000,
                    checkpoint_interval_s: tidemill_sched::DEFAULT_CHECKPOINT_INTERVAL_S,
                    on_infeasible: if rng.next(2) == 0 {
                        OnInfeasible::Reject
                    } else {
                        OnInfeasible::BestEffort
                    },
                },
                admission: if slo {
                    Admission::Pending
                } else {
                    Admission::BestEffort
                },
                progress: Progress::default(),
                reservation: Vec::new(),
            }
        })
        .collect();
    WorldSnapshot {
        nodes,
        links: LinkTable::default(),
        jobs,
        throughput: tables(),
        constraints: Default::default(),
    }
}

fn round(c: &mut Criterion) {
    let policy = Policy::default();
    let mut g = c.benchmark_group("round");
    g.sample_size(10);
    for n in [100, 1_000, 3_000, 10_000] {
        let w = world(n, n / 5);
        g.bench_with_input(BenchmarkId::new("nodes_jobs_5to1", n), &w, |b, w| {
            b.iter(|| schedule(black_box(w), NOW, &policy))
        });
    }
    g.finish();
}

criterion_group!(benches, round);
criterion_main!(benches);
