//! The README and `docs/` stay navigable: every relative link in them points
//! at a file that exists and, where it names an `#anchor`, at a heading that
//! GitHub renders with that slug. The README also stays short enough that its
//! first screen is the two commands and the way to install (issue 17).

#[path = "support/markdown.rs"]
mod markdown;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use markdown::{anchors, link_targets, prose_lines, slug};

/// The README's size limit: long material belongs in `docs/`.
const README_MAX_BYTES: usize = 15_000;

/// How many lines count as the README's first screen.
const FIRST_SCREEN_LINES: usize = 40;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent: the repository root")
        .to_path_buf()
}

/// README.md and every markdown file under docs/, sorted.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("read an entry of {}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    files.sort();
    files
}

/// Every broken relative link in `files`, one line each, naming the file,
/// the line, the target and what is wrong with it.
fn broken_links(files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for file in files {
        let text =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let dir = file.parent().expect("a file has a directory");
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                let at = format!("{}:{n}: ({target})", file.display());
                if !resolved.exists() {
                    broken.push(format!("{at}: {} does not exist", resolved.display()));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if resolved.extension().is_none_or(|x| x != "md") {
                    broken.push(format!("{at}: an #anchor on a file that is not markdown"));
                    continue;
                }
                let target_text = fs::read_to_string(&resolved)
                    .unwrap_or_else(|e| panic!("read {}: {e}", resolved.display()));
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!(
                        "{at}: no heading in {} has the anchor #{anchor}",
                        resolved.display()
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn every_link_in_the_readme_and_docs_resolves() {
    let root = repo_root();
    let files = markdown_files(&root);
    assert!(
        files.len() > 1,
        "expected README.md and docs/*.md, found {files:?}"
    );
    let broken = broken_links(&files);
    assert!(
        broken.is_empty(),
        "broken links (fix the path, or the #anchor to match a heading):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_readme_is_short_and_starts_with_the_commands_and_the_install() {
    let readme = fs::read_to_string(repo_root().join("README.md")).expect("read README.md");
    assert!(
        readme.len() < README_MAX_BYTES,
        "README.md is {} bytes, the limit is {README_MAX_BYTES}: move long material into docs/",
        readme.len()
    );
    let first: Vec<&str> = readme.lines().take(FIRST_SCREEN_LINES).collect();
    let first = first.join("\n");
    for command in [
        "cargo run -p tidemill-sim -- demo",
        "cargo test --workspace",
    ] {
        assert!(
            first.contains(command),
            "README.md's first {FIRST_SCREEN_LINES} lines lack `{command}`"
        );
    }
    let install_link = first.lines().flat_map(link_targets).any(|t| {
        t.split_once('#')
            .is_some_and(|(_, anchor)| anchor.starts_with("install"))
    });
    assert!(
        install_link,
        "README.md's first {FIRST_SCREEN_LINES} lines lack a link to an #install… section"
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug(" EdgeFlow's own setting: 16 A100 + 32 V100 edge servers"),
        "edgeflows-own-setting-16-a100--32-v100-edge-servers"
    );
    assert_eq!(
        slug(" Admission: queue (the default), reserve, each-round"),
        "admission-queue-the-default-reserve-each-round"
    );
    assert_eq!(slug(" The `dist` profile"), "the-dist-profile");
    assert_eq!(
        slug(" See [Security](security.md) first"),
        "see-security-first"
    );
    let repeated = anchors("# Tests\n\n## Tests\n\n```sh\n# not a heading\n```\n");
    assert_eq!(
        repeated,
        HashSet::from(["tests".to_string(), "tests-1".to_string()])
    );
}

#[test]
fn a_missing_file_or_anchor_is_reported() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let page = dir.path().join("page.md");
    fs::write(dir.path().join("there.md"), "# Here\n").expect("write there.md");
    fs::write(
        &page,
        "[ok](there.md#here) [gone](nowhere.md) [bad anchor](there.md#elsewhere)\n\
         `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n[self](#missing)\n",
    )
    .expect("write page.md");
    let broken = broken_links(&[page]);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].contains("(nowhere.md)") && broken[0].contains("does not exist"));
    assert!(broken[1].contains("#elsewhere"));
    assert!(broken[2].contains("#missing"));
}
