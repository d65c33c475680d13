//! Replays the fuzz corpus (`tests/fuzz/corpus/<target>/`) through the same
//! entry points the cargo-fuzz targets call, so that CI runs every input the
//! fuzzers kept. With `TIDEMILL_FUZZ_SEEDS=1` it first writes the seed inputs:
//! valid frames, messages, a job file and its JSON.

use std::path::{Path, PathBuf};

use tidemill_proto::{
    Capabilities, CloudMsg, Command, EdgeMsg, HEADER_LEN, Hello, Issued, Join, LinkSample, Report,
    ReportBody, Sample, TaskAssignment, TrainArrival, Welcome, encode,
};

/// A fuzz target's entry point.
type Check = fn(&[u8]);

/// The targets and their entry points.
const TARGETS: [(&str, Check); 5] = [
    ("frame", tidemill_proto::fuzzing::frame),
    ("edge_msg", tidemill_proto::fuzzing::edge_msg),
    ("cloud_msg", tidemill_proto::fuzzing::cloud_msg),
    ("job_toml", tidemill_cloud::fuzzing::job_toml),
    ("api_json", tidemill_cloud::fuzzing::api_json),
];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
}

fn edge_msgs() -> Vec<EdgeMsg> {
    vec![
        EdgeMsg::Hello(Hello {
            node_id: "e1".into(),
            capabilities: Capabilities {
                cpu_cores: 8,
                mem_bytes: 16 << 30,
                accelerators: vec![],
                os: "linux".into(),
                arch: "aarch64".into(),
                daemon_version: "0.1.0".into(),
            },
            probe_port: Some(7401),
            site: None,
        }),
        EdgeMsg::Join(Join {
            token_id: "abc123".into(),
            secret: "s3cr3t".into(),
            node_id: "e1".into(),
            public_key: vec![4; 65],
        }),
        EdgeMsg::Reports(vec![
            Report {
                seq: 1,
                body: ReportBody::Samples(vec![Sample {
                    t_ms: 1_800_000_000_000,
                    cpu_pct: 12.5,
                    per_core_pct: vec![10.0, 15.0],
                    mem_pct: 40.0,
                    net_rx_bytes: 1_000,
                    net_tx_bytes: 2_000,
                    gpu_pct: Some(3.0),
                }]),
            },
            Report {
                seq: 2,
                body: ReportBody::Links(vec![LinkSample {
                    peer: "cloud".into(),
                    t_ms: 1_800_000_000_000,
                    rtt_ms: 150.0,
                    bandwidth_bps: 1.25e6,
                    loss: 0.01,
                    probe_sent_bytes: 36_000,
                    probe_received_bytes: 4_000,
                }]),
            },
        ]),
        EdgeMsg::CommandAck { task_id: 3 },
        EdgeMsg::Probe {
            payload: vec![0; 64],
            train: Some(9),
        },
        EdgeMsg::PeersRequest,
    ]
}

fn cloud_msgs() -> Vec<CloudMsg> {
    vec![
        CloudMsg::Welcome(Welcome {
            acked_seq: 41,
            coordinator_version: "0.1.0".into(),
            issuing_ca_sha256: "ab".repeat(32),
            prior: None,
        }),
        CloudMsg::Ack { seq: 42 },
        CloudMsg::Command(Command::Assign(TaskAssignment {
            task_id: 1,
            job_id: 2,
            command: vec!["python3".into(), "train.py".into()],
            env: [("RANK".to_string(), "0".to_string())].into(),
            memory_bytes: Some(1 << 30),
            checkpoint_interval_s: Some(1800.0),
        })),
        CloudMsg::Command(Command::Cancel { task_id: 1 }),
        CloudMsg::ProbeAck {
            bytes: 64,
            train: Some(TrainArrival {
                arrivals_us: vec![0, 900, 1_800],
            }),
        },
        CloudMsg::Joined(Issued {
            cert: vec![0x30, 0x82, 0x01, 0x00],
            ca: vec![vec![0x30, 0x82, 0x01, 0x00]],
            issuer_sha256: "ab".repeat(32),
            not_after_ms: 1_831_536_000_000,
        }),
    ]
}

fn write_seeds() {
    let job_toml = include_str!("../../configs/job.toml");
    let job: tidemill_cloud::job::JobFile =
        tidemill_cloud::job::JobFile::from_toml(job_toml, "configs/job.toml").unwrap();
    let mut seeds: Vec<(&str, Vec<u8>)> = Vec::new();
    for m in edge_msgs() {
        let frame = encode(&m).unwrap();
        seeds.push(("edge_msg", frame[HEADER_LEN..].to_vec()));
        seeds.push(("frame", frame));
    }
    for m in cloud_msgs() {
        let frame = encode(&m).unwrap();
        seeds.push(("cloud_msg", frame[HEADER_LEN..].to_vec()));
        seeds.push(("frame", frame));
    }
    seeds.push(("job_toml", job_toml.as_bytes().to_vec()));
    seeds.push(("api_json", serde_json::to_vec(&job).unwrap()));
    seeds.push((
        "api_json",
        br#"{"ttl_secs":86400,"uses":3,"description":"site A"}"#.to_vec(),
    ));
    seeds.push((
        "api_json",
        br#"{"scope":"read","description":"grafana"}"#.to_vec(),
    ));
    for (k, (target, bytes)) in seeds.iter().enumerate() {
        let dir = corpus().join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{k:02}")), bytes).unwrap();
    }
}

#[test]
fn every_corpus_input_is_handled() {
    if std::env::var_os("TIDEMILL_FUZZ_SEEDS").is_some() {
        write_seeds();
    }
    for (target, check) in TARGETS {
        let dir = corpus().join(target);
        let inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; write seeds with TIDEMILL_FUZZ_SEEDS=1",
                    dir.display()
                )
            })
            .map(|e| e.unwrap().path())
            .collect();
        assert!(!inputs.is_empty(), "{} is empty", dir.display());
        for input in &inputs {
            check(&std::fs::read(input).unwrap());
        }
        eprintln!("{target}: {} corpus inputs handled", inputs.len());
    }
}
