//! Reading markdown as GitHub renders it: prose lines outside fences,
//! inline links, and the anchors headings get. `docs_links` checks links with
//! it and `cli_docs` finds the sections links point at;
//! each uses a part of it.
#![allow(dead_code)]

use std::collections::HashSet;

/// A line with its inline code spans removed, so that `[a](b)` inside
/// backticks is not taken for a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// Inline link targets on a line: `[text](target)` and `![alt](target)`.
pub fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(end) => {
                targets.push(after[..end].trim().to_string());
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    targets
}

/// The lines of a markdown text outside fenced code blocks, numbered from 1.
pub fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            out.push((i + 1, line));
        }
    }
    out
}

/// The anchor GitHub gives a heading's text: links reduced to their text,
/// lower case, letters, digits, `-` and `_` kept, spaces as `-`, the rest
/// dropped.
pub fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(i) = rest.find("](") {
        let close = rest[i + 2..].find(')').map(|e| i + 2 + e + 1);
        text.push_str(&rest[..i]);
        rest = close.map_or("", |c| &rest[c..]);
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().collect::<String>())
            } else if c == ' ' {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// A heading outside fenced code: where it stands, how deep it is, its text
/// and the anchor GitHub gives it.
pub struct Heading {
    /// Its line number, from 1.
    pub line: usize,
    /// 1 for `#`, up to 6.
    pub level: usize,
    /// The text after the hashes.
    pub text: String,
    /// Its slug, with GitHub's `-1`, `-2` suffixes for repeats.
    pub anchor: String,
}

/// Every heading of a markdown text, in order.
pub fn headings(text: &str) -> Vec<Heading> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut k = 0;
        while seen.contains(&anchor) {
            k += 1;
            anchor = format!("{base}-{k}");
        }
        seen.insert(anchor.clone());
        out.push(Heading {
            line: n,
            level: hashes,
            text: line[hashes..].trim().to_string(),
            anchor,
        });
    }
    out
}

/// Every anchor a markdown text's headings produce.
pub fn anchors(text: &str) -> HashSet<String> {
    headings(text).into_iter().map(|h| h.anchor).collect()
}
