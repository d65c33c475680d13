//! What the engine charges, checked by hand: the scheduler library's cost
//! model over the topology's link tiers, and a baseline run through the engine.

mod link_tiers {

    use crate::simulate::topology::LinkTiers;
    use tidemill_sched::placement::{CostModel, CostNode};
    use tidemill_sched::{DataSite, JobSpec, LinkClass, ThroughputTables};
    use tidemill_sched::{LinkDefault, OnInfeasible};

    /// A cloud node `c`, boxes `a0` and `a1` at site `a`, box `b0` at site `b`;
    /// with `tiered`, boxes of one site share a 10 Gb/s, 0.2 ms link.
    fn model(tiered: bool) -> CostModel {
        let node = |id: &str, class: &str, site: Option<&str>, edge: Option<usize>| CostNode {
            id: id.into(),
            class: class.into(),
            devices: 1,
            price_per_gpu_hour: edge.is_none().then_some(3.0),
            edge,
            site: site.map(str::to_string),
        };
        let nodes = vec![
            node("c", "A", None, None),
            node("a0", "E", Some("a"), Some(0)),
            node("a1", "E", Some("a"), Some(1)),
            node("b0", "E", Some("b"), Some(2)),
        ];
        let link = |mbps, ms| LinkDefault {
            bandwidth_mbps: mbps,
            latency_ms: ms,
            loss: 0.0,
            congestion: Default::default(),
        };
        let tiers = LinkTiers {
            edge_edge: link(1000.0, 10.0),
            cloud_edge: link(100.0, 30.0),
            cloud_cloud: link(100_000.0, 0.05),
            same_site: tiered.then(|| link(10_000.0, 0.2)),
        };
        let mut tables = ThroughputTables::default();
        tables
            .insert_csv("E", "m", "e", "global_batch_size,1,2\n64,2.0,3.0\n")
            .unwrap();
        let links = tiers.table(&nodes);
        CostModel::new(nodes, tables, links, 2.0, 30.0)
    }

    fn job() -> JobSpec {
        JobSpec {
            id: 0,
            class: tidemill_sched::JobClass::Slo,
            submitted_ms: 0,
            deadline_ms: 1,
            iterations: 1.0,
            global_batch: 64,
            model: "m".into(),
            model_bytes: 100_000_000,
            dataset_bytes: 1_250_000_000,
            dataset_site: DataSite::Cloud,
            min_workers: 1,
            max_workers: 2,
            memory_per_worker_bytes: 0,
            checkpoint_bytes: 1_250_000_000,
            checkpoint_interval_s: tidemill_sched::DEFAULT_CHECKPOINT_INTERVAL_S,
            on_infeasible: OnInfeasible::Reject,
        }
    }

    #[test]
    fn the_link_table_holds_exactly_the_same_site_pairs() {
        let m = model(true);
        assert_eq!(m.links().measured.len(), 1);
        let l = &m.links().measured[0];
        assert_eq!((l.a.as_str(), l.b.as_str()), ("a0", "a1"));
        assert_eq!(l.link.bandwidth_bps, 1.25e9);
        assert!(model(false).links().measured.is_empty());
    }

    #[test]
    fn all_reduce_inside_a_site_uses_the_same_site_tier() {
        // Compute: 1 / 3 it/s at 2 workers. Ring of 2 nodes, M = 1e8 B:
        // T_n = 2(n−1)/n × M / B + 2(n−1) × (latency + 1.25 × RTT), loss-based senders.
        // Same site: 1e8 / 1.25e9 + 2 × (0.0002 + 1.25 × 0.0004) = 0.0814 s.
        // Across sites: 1e8 / 1.25e8 + 2 × (0.01 + 1.25 × 0.02) = 0.87 s.
        // T = (T_c² + T_n²)^½ with γ = 2.
        let hand = |sync: f64| ((1.0f64 / 3.0).powi(2) + sync * sync).sqrt();
        let m = model(true);
        let (inside, class) = m.step(&job(), &[(1, 1), (2, 1)]).unwrap();
        assert!((inside - hand(0.0814)).abs() < 1e-12, "{inside}");
        assert_eq!(class, Some(LinkClass::EdgeEdge));
        let (across, _) = m.step(&job(), &[(1, 1), (3, 1)]).unwrap();
        assert!((across - hand(0.87)).abs() < 1e-12, "{across}");
        // Without the tier, the pair inside the site is edge-edge too.
        let flat = model(false).step(&job(), &[(1, 1), (2, 1)]).unwrap().0;
        assert!((flat - hand(0.87)).abs() < 1e-12, "{flat}");
    }

    #[test]
    fn checkpoint_moves_inside_a_site_use_the_same_site_tier() {
        let m = model(true);
        // Data shard from the cloud: 1.25e9 B / 12.5e6 B/s + 0.03 s = 100.03 s.
        // Checkpoint of 1.25e9 B: inside the site 1 s + 0.0002 s; across 10 s + 0.01 s.
        // Plus the 30 s restart.
        let inside = m.startup(&job(), &[(1, 1)], &[(2, 1)]);
        assert!(
            (inside.secs - (100.03 + 1.0002 + 30.0)).abs() < 1e-9,
            "{inside:?}"
        );
        let across = m.startup(&job(), &[(1, 1)], &[(3, 1)]);
        assert!(
            (across.secs - (100.03 + 10.01 + 30.0)).abs() < 1e-9,
            "{across:?}"
        );
        // The checkpoint's bytes inside a site count as the site's LAN,
        // across sites as between sites; the shard comes from the cloud.
        assert_eq!(inside.wan.site_lan, 1.25e9);
        assert_eq!(inside.wan.cloud_edge, 1.25e9);
        assert_eq!(inside.wan.wan(), 1.25e9);
        assert_eq!(across.wan.between_sites, 1.25e9);
        assert_eq!(across.wan.site_lan, 0.0);
    }

    #[test]
    fn a_dataset_on_a_box_is_staged_over_the_link_from_that_box() {
        let m = model(true);
        let on_a0 = JobSpec {
            dataset_site: DataSite::Node("a0".into()),
            ..job()
        };
        // To a1 (same site): 1.25e9 B / 1.25e9 B/s + 0.0002 s, plus the restart.
        let su = m.startup(&on_a0, &[], &[(2, 1)]);
        assert!((su.secs - (1.0002 + 30.0)).abs() < 1e-9, "{su:?}");
        // On a0 itself nothing moves.
        assert_eq!(m.startup(&on_a0, &[], &[(1, 1)]).secs, 30.0);
    }
}

mod edf_elasticflow {

    use tidemill_sched::policies::EdfElasticFlow;

    use crate::simulate::edges::EdgeWorld;
    use crate::simulate::engine::{self, World};
    use crate::simulate::jobs::TraceJob;
    use crate::simulate::policies::JobStatus;
    use crate::simulate::signals::RunSignals;
    use crate::simulate::testkit::{self, cloud_node};
    use tidemill_sched::{JobSpec, ThroughputTables};

    fn job(id: u64, deadline_s: i64, batch: u32, max_workers: u32, iterations: f64) -> TraceJob {
        let base = testkit::job("m");
        TraceJob {
            name: id.to_string(),
            spec: JobSpec {
                id,
                deadline_ms: deadline_s * 1000,
                iterations,
                global_batch: batch,
                max_workers,
                ..base.spec
            },
            ..base
        }
    }

    /// Two 4-GPU nodes; model `m` measured on 1, 2 and 8 GPUs at batch 64
    /// (4 is missing) and on 1 to 8 at batch 128 (1 it/s per GPU).
    /// Job 0 (2 GPUs at most) is late after 30 s; jobs 1 and 2 are long.
    fn world() -> World {
        let mut tables = ThroughputTables::default();
        tables
            .insert_csv(
                "A",
                "m",
                "m.csv",
                "global_batch_size,1,2,4,8\n64,1.0,1.9,nan,3.0\n128,1.0,2.0,4.0,8.0\n",
            )
            .unwrap();
        testkit::world(
            vec![
                job(0, 30, 128, 2, 600.0),
                job(1, 10_000, 64, 8, 100_000.0),
                job(2, 20_000, 128, 8, 100_000.0),
            ],
            vec![cloud_node("c0", "A", 4), cloud_node("c1", "A", 4)],
            tables,
            EdgeWorld::new(&[], &[], 0, 3_600_000, 0, 0),
            20_000_000,
        )
    }

    #[test]
    fn widest_measured_count_in_deadline_order_and_late_jobs_run_on() {
        let w = world();
        let signals = RunSignals::oracle(&w.edges);
        let o = engine::run(&w, &mut EdfElasticFlow, &signals, true, &mut |_| {}).unwrap();
        let held = |j: usize, t: i64| -> u32 {
            o.stints
                .iter()
                .filter(|s| s.job == j && s.start_ms <= t && t < s.end_ms)
                .flat_map(|s| s.place.iter().map(|p| p.1))
                .sum()
        };
        // At 0: job 0 (earliest deadline) takes its cap of 2; job 1 cannot
        // have 4 (not measured at batch 64) and takes 2; job 2 takes the 4 left.
        assert_eq!((held(0, 0), held(1, 0), held(2, 0)), (2, 2, 4));
        // Job 0 runs past its deadline to the end: 30 s restart + 600 it at
        // 2 it/s = 330 s (plus staging its 1-byte dataset); it is neither
        // rejected nor abandoned.
        assert_eq!(o.jobs[0].status, JobStatus::Done);
        let finish = o.jobs[0].finish_ms.unwrap();
        assert!((330_000..331_000).contains(&finish), "{finish}");
        // At the next round (360 s) job 1 takes all 8 GPUs and job 2 waits.
        assert_eq!((held(1, 360_000), held(2, 360_000)), (8, 0));
    }
}
