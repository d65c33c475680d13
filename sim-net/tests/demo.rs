//! `tidemill-sim demo` end to end: the whole loopback cluster runs, every job
//! ends as the demo means it to, and the output keeps its promises: the nodes
//! first, each edge's idle windows, every time on the tide clock, and a final
//! table with deadline, finish, slack and a verdict for each job.

use std::process::Command;

/// At a third of the demo's default speed (1200 tide seconds a wall second):
/// at 3600× a machine starved for a second by other builds loses an hour of
/// tide, and CI once saw two jobs miss their deadlines that way.
#[test]
fn the_demo_runs_and_reports_on_one_clock() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo");
    let out = Command::new(env!("CARGO_BIN_EXE_tidemill-sim"))
        .args([
            "demo",
            "--speed",
            "1200",
            "--timeout-secs",
            "540",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let tide: Vec<&str> = stdout.lines().filter(|l| l.starts_with("[tide")).collect();
    let first = tide.first().expect("tide lines");
    for n in ["node-000", "node-001", "node-002"] {
        assert!(
            first.contains(&format!("{n} (")) && first.contains(" cores, no accelerator"),
            "{first}"
        );
    }
    assert!(
        first.contains(" nodes: ") && first.contains("class cpu"),
        "{first}"
    );
    for n in ["node-000", "node-001", "node-002"] {
        let forecast = tide
            .iter()
            .find(|l| l.contains(&format!("{n} forecast (")))
            .unwrap_or_else(|| panic!("no forecast line for {n}:\n{stdout}"));
        assert!(
            forecast.contains("idle d") && forecast.contains("(confidence 0."),
            "{forecast}"
        );
    }
    // One clock: the demo's own lines carry no absolute dates.
    for l in &tide {
        assert!(!l.contains("UTC") && !has_date(l), "{l}");
    }

    let header = stdout
        .lines()
        .find(|l| l.contains("VERDICT"))
        .expect("final table");
    for column in [
        "JOB", "STATE", "NODE(S)", "DEADLINE", "FINISHED", "SLACK", "VERDICT", "REASON",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let row = |name: &str| {
        stdout
            .lines()
            .skip_while(|l| !l.contains("VERDICT"))
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for name in [
        "resnet50-night-1",
        "bert-night-2",
        "vgg16-night-3",
        "gpt2-noon-1",
        "gpt2-noon-2",
    ] {
        let cells = row(name);
        // ID JOB STATE NODE dN HH:MM dN HH:MM SLACK VERDICT ...
        assert_eq!(cells[2], "succeeded", "{cells:?}");
        assert!(
            cells[4].starts_with('d') && cells[6].starts_with('d'),
            "{cells:?}"
        );
        assert!(
            cells[8].starts_with('+'),
            "finished before its deadline: {cells:?}"
        );
        assert_eq!(cells[9], "met", "{cells:?}");
        assert!(
            !cells.join(" ").contains("keeps its reservation"),
            "{cells:?}"
        );
    }
    let broken = row("broken-config");
    assert_eq!(broken[2], "failed");
    assert_eq!(broken[9..12].join(" "), "failed as intended", "{broken:?}");
    assert!(broken.join(" ").contains("no [work]"), "{broken:?}");
    assert!(stdout.contains("all 6 jobs ended as expected"), "{stdout}");

    // The story's words agree with the table: each job's last line before
    // it says how it was admitted as its row does.
    for name in [
        "resnet50-night-1",
        "bert-night-2",
        "vgg16-night-3",
        "broken-config",
        "gpt2-noon-1",
        "gpt2-noon-2",
    ] {
        let said = tide
            .iter()
            .rfind(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{stdout}"));
        let admitted = said
            .split_once("): ")
            .and_then(|(_, rest)| rest.split_once(';'))
            .map(|(a, _)| a)
            .unwrap_or_else(|| panic!("{name} does not end with its verdict: {said}"));
        let row = row(name).join(" ");
        assert!(row.contains(&format!(" {admitted};")), "{said}\n{row}");
    }
    // Log lines go to the data dir's demo.log, not into the story.
    for l in stdout.lines().chain(stderr.lines()) {
        for level in ["  INFO ", "  WARN ", " ERROR ", " DEBUG "] {
            assert!(!l.contains(level), "a log line on the terminal: {l}");
        }
    }
    assert!(data.join("demo.log").is_file(), "{stdout}");
}

/// Whether `line` holds a calendar date such as `2026-11-25`.
fn has_date(line: &str) -> bool {
    line.as_bytes()
        .windows(5)
        .any(|w| w[..4].iter().all(u8::is_ascii_digit) && w[4] == b'-')
}
