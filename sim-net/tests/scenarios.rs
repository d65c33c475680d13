//! The shipped scenarios (`configs/scenarios/`): each runs as it is from the
//! repository root, and each documented λ is the one its cited source gives.

mod support;

use std::collections::BTreeMap;

use support::{data, repo, sim};

fn ratios(file: &str) -> csv::Reader<std::fs::File> {
    csv::Reader::from_path(data(&format!("gpu-throughput-profiles/ratios/{file}"))).unwrap()
}

/// `model → λ` of `[throughputs.CLASS.lambda]` in a scenario.
fn lambdas(scenario: &str, class: &str) -> BTreeMap<String, f64> {
    let text = std::fs::read_to_string(repo().join("configs/scenarios").join(scenario)).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap();
    doc["throughputs"][class]["lambda"]
        .as_table()
        .unwrap_or_else(|| panic!("{scenario}: no [throughputs.{class}.lambda]"))
        .iter()
        .map(|(m, v)| (m.clone(), v["ratio"].as_float().unwrap()))
        .collect()
}

/// Each `(model, λ)` of `want` is the scenario's λ, within 0.0006.
fn assert_lambdas(got: &BTreeMap<String, f64>, want: &[(&str, f64)]) {
    for &(model, ratio) in want {
        assert!(
            (got[model] - ratio).abs() < 0.0006,
            "{model}: {} in the scenario, {ratio:.4} from the source",
            got[model]
        );
    }
}

#[test]
fn edgeflow_v100_lambdas_are_the_cited_benchmark_ratios() {
    // lambda_ratios_vs_A100.csv, fp16 rows, V100 16GB against A100 80GB SXM4.
    let mut v100 = BTreeMap::new();
    for r in ratios("lambda_ratios_vs_A100.csv").records() {
        let r = r.unwrap();
        if &r[0] == "fp16" && &r[2] == "A100 80GB SXM4" && r[4].contains("V100") {
            let ratio = r[5].parse::<f64>().unwrap() / r[3].parse::<f64>().unwrap();
            v100.insert(r[1].to_string(), ratio);
        }
    }
    let mut all: Vec<f64> = v100.values().copied().collect();
    all.sort_by(f64::total_cmp);
    let median = all[all.len() / 2];
    let want = [
        ("resnet50", v100["resnet50"]),
        ("vgg16", v100["resnet50"]),
        ("inception3", v100["resnet50"]),
        ("bert", v100["bert_base_squad"]),
        ("gpt2", v100["transformerxlbase"]),
        ("deepspeech2", median),
    ];
    let got = lambdas("edgeflow-v100.toml", "V100");
    assert_eq!(got.len(), want.len(), "{got:?}");
    assert_lambdas(&got, &want);
}

#[test]
fn mec_t4_lambdas_are_the_like_for_like_sia_ratios() {
    // sia_derived_lambda_vs_A100.csv at one GPU: model, global batch → λ_T4.
    let mut t4 = BTreeMap::new();
    for r in ratios("sia_derived_lambda_vs_A100.csv").records() {
        let r = r.unwrap();
        if &r[2] == "1" {
            t4.insert(
                (r[0].to_string(), r[1].to_string()),
                r[9].parse::<f64>().unwrap(),
            );
        }
    }
    let at = |m: &str, b: &str| t4[&(m.to_string(), b.to_string())];
    let want = [
        ("resnet50", at("imagenet", "3200")),
        ("vgg16", at("imagenet", "3200")),
        ("inception3", at("imagenet", "3200")),
        ("bert", at("bert", "384")),
        ("gpt2", at("bert", "384")),
        ("deepspeech2", at("deepspeech2", "320")),
    ];
    assert_lambdas(&lambdas("mec-sites.toml", "T4"), &want);
}

#[test]
fn every_scenario_runs_as_it_is_from_the_repository_root() {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("configs/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "{names:?}");
    for name in names {
        let topology = format!("configs/scenarios/{name}");
        let out = sim(&[
            "simulate",
            "--topology",
            &topology,
            "--max-jobs",
            "25",
            "--policies",
            "tidemill,edgeflow,elasticflow",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("edge_gain"), "{name}: {stdout}");
        assert!(
            stdout.contains("class "),
            "{name}: no device class sources: {stdout}"
        );
    }
}
