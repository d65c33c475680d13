// Build metadata for `--version`, included by the binaries' build scripts
// (edge/build.rs, cloud/build.rs, sim-net/build.rs): the git commit (short
// hash, "-dirty" with uncommitted changes, "unknown" without git, as in a
// tarball build) and the build date in UTC (SOURCE_DATE_EPOCH when set, for
// reproducible builds).
//
// The script reruns when HEAD moves (a commit, a checkout) or the crate's own
// sources change, never on every build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn emit() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = match git(&dir, &["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) => {
            // Only files that exist: cargo reruns the script on every build
            // while a watched file is missing (packed-refs often is).
            let branch = git(&dir, &["symbolic-ref", "-q", "HEAD"]);
            for file in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
                if let Some(p) = git(&dir, &["rev-parse", "--git-path", file])
                    && dir.join(&p).exists()
                {
                    println!("cargo:rerun-if-changed={}", dir.join(p).display());
                }
            }
            let dirty = git(&dir, &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{hash}-dirty") } else { hash }
        }
        None => "unknown".to_string(),
    };
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    println!("cargo:rustc-env=TIDEMILL_GIT_COMMIT={commit}");
    println!(
        "cargo:rustc-env=TIDEMILL_BUILD_DATE={y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    );
}
