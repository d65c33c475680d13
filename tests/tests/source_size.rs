//! Every Rust source file in the workspace keeps to the size the codebase is
//! written at: at most 600 lines before its first `#[cfg(test)]` line, so
//! that each module stays one job a reader can hold (issue 34). A file that
//! grows past it is split by subject into modules, not trimmed.

use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a source file may have before its tests.
const MAX_LINES_BEFORE_TESTS: usize = 600;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent: the repository root")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, skipping build output (`target`) and hidden
/// directories such as `.git`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("read an entry of {}: {e}", dir.display()))
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// How many lines come before the first line that starts with
/// `#[cfg(test)]` (all of them when there is none).
fn lines_before_tests(text: &str) -> usize {
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .count()
}

/// The files over the limit, as `path: N lines` relative to `root`, sorted.
fn oversized(root: &Path, limit: usize) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    files
        .iter()
        .filter_map(|path| {
            let text =
                fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            let n = lines_before_tests(&text);
            (n > limit).then(|| {
                let rel = path.strip_prefix(root).unwrap_or(path);
                format!("{}: {n} lines", rel.display())
            })
        })
        .collect()
}

#[test]
fn no_source_file_is_over_600_lines_before_its_tests() {
    let over = oversized(&repo_root(), MAX_LINES_BEFORE_TESTS);
    assert!(
        over.is_empty(),
        "{} source file(s) have more than {MAX_LINES_BEFORE_TESTS} lines before their first \
         #[cfg(test)] line:\n  {}\nSplit each by subject into modules whose names say their one \
         job (re-export moved items with `pub use` where other code imports them); do not trim \
         it to fit.",
        over.len(),
        over.join("\n  ")
    );
}

#[test]
fn the_walk_finds_the_workspace_sources_and_counts_up_to_the_tests() {
    let mut files = Vec::new();
    rust_files(&repo_root(), &mut files);
    let this = Path::new(file!())
        .file_name()
        .expect("file!() names a file");
    assert!(
        files.iter().any(|f| f.file_name() == Some(this)),
        "the walk from {} did not find {}; it would pass without looking",
        repo_root().display(),
        this.display()
    );
    assert!(
        !files
            .iter()
            .any(|f| f.components().any(|c| c.as_os_str() == "target")),
        "the walk went into a target directory"
    );
    assert_eq!(lines_before_tests("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(lines_before_tests("a\nb\nc\n"), 3);
    // Under a limit this file exceeds, the check names it: it can fail.
    let named = oversized(&repo_root(), 10);
    assert!(
        named.iter().any(|line| line.contains("source_size.rs: ")),
        "a 10-line limit did not name this file: {named:?}"
    );
}
