//! A property test that guaranteed jobs never miss their deadlines, on
//! random worlds run forward by the test executor.

#[allow(dead_code)]
mod common;

use common::*;

mod guarantee {
    use super::common::*;
    use proptest::prelude::*;
    use tidemill_sched::*;

    fn arb_edge(i: usize) -> impl Strategy<Value = NodeSpec> {
        (1u32..=2, 0i64..12 * 60, 60i64..10 * 60, 0i64..6 * 60).prop_map(
            move |(dev, start_min, len_min, gap_min)| {
                // Two windows a day apart-ish, not aligned to slots.
                let s1 = 15 * H + start_min * 60_000 + 7_000;
                let e1 = s1 + len_min * 60_000;
                let s2 = e1 + (gap_min + 60) * 60_000;
                let e2 = s2 + len_min * 60_000;
                edge(&format!("e{i}"), dev, &[(s1, e1), (s2, e2)], 10.0)
            },
        )
    }

    fn arb_job(id: u64) -> impl Strategy<Value = JobState> {
        (
            0i64..8 * 60,
            60i64..30 * 60,
            100.0f64..60_000.0,
            1u32..=4,
            any::<bool>(),
            any::<bool>(),
            0u64..3,
        )
            .prop_map(
                move |(sub_min, slack_min, iters, maxw, slo, reject, data)| {
                    let sub = 14 * H + sub_min * 60_000 + 1_234;
                    let class = if slo {
                        JobClass::Slo
                    } else {
                        JobClass::BestEffort
                    };
                    let mut j = job(id, class, sub, sub + slack_min * 60_000, iters);
                    j.spec.max_workers = maxw;
                    j.spec.dataset_bytes = data * 1_000_000_000;
                    if data == 2 {
                        j.spec.dataset_site = DataSite::Node("e0".into());
                    }
                    j.spec.on_infeasible = if reject {
                        OnInfeasible::Reject
                    } else {
                        OnInfeasible::BestEffort
                    };
                    j
                },
            )
    }

    fn arb_instance() -> impl Strategy<Value = (Vec<NodeSpec>, Vec<JobState>)> {
        (0usize..=2, 1u32..=4, 1usize..=4, 1usize..=7).prop_flat_map(
            |(n_cloud, gpus, n_edge, n_jobs)| {
                let edges: Vec<_> = (0..n_edge).map(arb_edge).collect();
                let jobs: Vec<_> = (0..n_jobs as u64).map(arb_job).collect();
                (Just(n_cloud), Just(gpus), edges, jobs).prop_map(|(n_cloud, gpus, edges, jobs)| {
                    (clouds_and(n_cloud, gpus, edges), jobs)
                })
            },
        )
    }

    /// `n_cloud` cloud nodes of `gpus` GPUs each, then `edges`.
    fn clouds_and(n_cloud: usize, gpus: u32, edges: Vec<NodeSpec>) -> Vec<NodeSpec> {
        let mut nodes: Vec<NodeSpec> = (0..n_cloud)
            .map(|i| cloud(&format!("c{i}"), gpus))
            .collect();
        nodes.extend(edges);
        nodes
    }

    /// Runs the instance under `policy` (with a 40 h horizon) and checks
    /// that every guaranteed job met its deadline; the executor itself
    /// asserts that no guarantee is dropped, no job runs on a busy edge and
    /// no node is overbooked.
    fn keeps_guarantees(
        policy: Policy,
        nodes: Vec<NodeSpec>,
        jobs: Vec<JobState>,
    ) -> Result<(), TestCaseError> {
        let policy = Policy {
            horizon_ms: 40 * H,
            ..policy
        };
        let outcomes = simulate(nodes, jobs, &policy, 14 * H, 56 * H);
        for o in outcomes.iter().filter(|o| o.ever_guaranteed) {
            let fin = o.finished_ms;
            prop_assert!(
                fin.is_some_and(|f| f <= o.deadline_ms),
                "guaranteed job {} finished at {:?}, deadline {}; all: {:?}",
                o.job_id,
                fin,
                o.deadline_ms,
                outcomes
            );
        }
        Ok(())
    }

    /// A busy cloud of 4 to 8 GPUs per node and 3 to 8 jobs of up to 8
    /// workers arriving within 2 hours, due 1 to 8 hours later, so shapes
    /// must change to fit.
    fn arb_elastic_instance() -> impl Strategy<Value = (Vec<NodeSpec>, Vec<JobState>)> {
        (1usize..=2, 4u32..=8, 0usize..=2, 3usize..=8).prop_flat_map(
            |(n_cloud, gpus, n_edge, n_jobs)| {
                let edges: Vec<_> = (0..n_edge).map(arb_edge).collect();
                let jobs: Vec<_> = (0..n_jobs as u64)
                    .map(|id| {
                        (
                            arb_job(id),
                            0i64..2 * 60,
                            60i64..8 * 60,
                            1u32..=8,
                            20_000.0f64..300_000.0,
                        )
                            .prop_map(
                                |(mut j, sub_min, slack_min, maxw, iters)| {
                                    j.spec.submitted_ms = 14 * H + sub_min * 60_000;
                                    j.spec.deadline_ms = j.spec.submitted_ms + slack_min * 60_000;
                                    j.spec.max_workers = maxw;
                                    j.spec.iterations = iters;
                                    j
                                },
                            )
                    })
                    .collect();
                (Just(n_cloud), Just(gpus), edges, jobs).prop_map(|(n_cloud, gpus, edges, jobs)| {
                    (clouds_and(n_cloud, gpus, edges), jobs)
                })
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn elastic_plans_break_no_guarantee_and_overbook_no_node((nodes, jobs) in arb_elastic_instance()) {
            keeps_guarantees(Policy::default(), nodes.clone(), jobs.clone())?;
            keeps_guarantees(super::policy(), nodes, jobs)?;
        }

        #[test]
        fn guaranteed_jobs_never_miss_their_deadlines((nodes, jobs) in arb_instance()) {
            keeps_guarantees(super::policy(), nodes, jobs)?;
        }

        #[test]
        fn running_ahead_breaks_no_guarantee_and_overbooks_no_node((nodes, jobs) in arb_instance()) {
            keeps_guarantees(Policy { run_ahead: true, ..super::policy() }, nodes, jobs)?;
        }

        #[test]
        fn reshuffling_and_running_ahead_break_no_guarantee_and_overbook_no_node((nodes, jobs) in arb_instance()) {
            let both = Policy { run_ahead: true, reshuffle: true, ..super::policy() };
            keeps_guarantees(both, nodes, jobs)?;
        }

        #[test]
        fn the_default_queue_admission_breaks_no_guarantee_and_overbooks_no_node((nodes, jobs) in arb_instance()) {
            keeps_guarantees(Policy::default(), nodes, jobs)?;
        }

        #[test]
        fn a_promise_lead_breaks_no_guarantee_and_overbooks_no_node(
            (nodes, jobs) in arb_instance(),
            lead_h in 1i64..=48,
        ) {
            let lead = Policy { promise_lead_ms: lead_h * H, ..Policy::default() };
            keeps_guarantees(lead, nodes, jobs)?;
        }
    }

    #[test]
    fn the_elastic_property_test_sees_elastic_guarantees() {
        // Sanity: over the first 64 instances of the elastic strategy, under
        // reserve admission, some guaranteed jobs ran on elastic plans (2 do).
        use proptest::strategy::ValueTree;
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        let strategy = arb_elastic_instance();
        let mut elastic = 0;
        for _ in 0..64 {
            let (nodes, jobs) = strategy.new_tree(&mut runner).unwrap().current();
            let policy = Policy {
                horizon_ms: 40 * H,
                ..super::policy()
            };
            let out = simulate(nodes, jobs, &policy, 14 * H, 56 * H);
            elastic += out
                .iter()
                .filter(|o| o.ever_guaranteed && o.elastic_rounds > 0)
                .count();
        }
        assert!(elastic > 0, "no elastic guarantee in 64 instances");
    }

    #[test]
    fn the_executor_sees_guarantees_on_a_busy_night() {
        // Sanity: the property test exercises both edge and cloud guarantees.
        let nodes = vec![
            cloud("c0", 2),
            edge("e0", 1, &[(22 * H, 30 * H)], 10.0),
            edge("e1", 1, &[(23 * H, 27 * H)], 10.0),
        ];
        let jobs = vec![
            job(1, JobClass::Slo, 18 * H, 32 * H, 20_000.0),
            job(2, JobClass::Slo, 18 * H, 33 * H, 40_000.0),
            job(3, JobClass::BestEffort, 18 * H, 33 * H, 5_000.0),
        ];
        let out = simulate(nodes, jobs, &super::policy(), 18 * H, 40 * H);
        assert!(out.iter().all(|o| o.finished_ms.is_some()), "{out:?}");
        assert!(
            out.iter().filter(|o| o.ever_guaranteed).count() == 2,
            "{out:?}"
        );
    }
}
