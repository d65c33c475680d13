//! docs/cli.md documents every subcommand and long flag the three binaries
//! take (issue 34). The test walks each binary's `--help`, subcommand by
//! subcommand, and checks each against the doc's entries:
//!
//! * an **entry** is a table row, or a heading with the section under it,
//!   whose first `code` span starts with the binary and the subcommand,
//!   e.g. `` `tidemill-cloud nodes drain ID` ``; the binary may be written
//!   `tidemill-{cloud,edge}` for both;
//! * every subcommand that runs by itself (one without subcommands, or whose
//!   subcommand is optional, like `nodes`) has an entry;
//! * every long flag it takes (but `--help` and `--version`) is written
//!   `--flag` in its entry, or in a section of cli.md the entry links to
//!   (`[client flags](#client-flags)`), so that flags several commands share
//!   are explained once;
//! * a flag the entry's own `code` span shows is one the subcommand takes.

#[path = "support/markdown.rs"]
mod markdown;

use std::collections::HashSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use markdown::{headings, link_targets, prose_lines};

/// The binaries, by the name docs/cli.md gives them, and the harness build of
/// each that runs the current code.
const BINARIES: [(&str, &str); 3] = [
    ("tidemill-cloud", env!("CARGO_BIN_EXE_harness-cloud")),
    ("tidemill-edge", env!("CARGO_BIN_EXE_harness-edge")),
    ("tidemill-sim", env!("CARGO_BIN_EXE_harness-sim")),
];

/// How long one `--help` may take, on a busy machine.
const HELP_DEADLINE: Duration = Duration::from_secs(30);

/// Flags every command has, which the doc need not repeat.
const CLAP_FLAGS: [&str; 2] = ["--help", "--version"];

/// What one `--help` says: the subcommands, the long flags, and whether a
/// subcommand must be given.
#[derive(Debug, PartialEq)]
struct Help {
    commands: Vec<String>,
    flags: Vec<String>,
    needs_command: bool,
}

/// One subcommand of a binary, as its `--help` describes it.
#[derive(Debug)]
struct Sub {
    /// The words after the binary's name; empty for the binary itself.
    path: Vec<String>,
    flags: Vec<String>,
    /// Whether it runs by itself, so that it needs its own entry.
    runnable: bool,
}

/// `exe ARGS --help`'s standard output, within [`HELP_DEADLINE`].
fn help(exe: &str, args: &[String]) -> String {
    let shown = format!("{exe} {} --help", args.join(" "));
    let mut child = Command::new(exe)
        .args(args)
        .arg("--help")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let read = stdout.read_to_string(&mut text).map(|_| text);
        let _ = tx.send(read);
    });
    let Ok(read) = rx.recv_timeout(HELP_DEADLINE) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{shown} did not finish within {HELP_DEADLINE:?}");
    };
    let text = read.unwrap_or_else(|e| panic!("read {shown}'s output: {e}"));
    let out = child.wait_with_output().expect("its exit status");
    assert!(
        out.status.success(),
        "{shown} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Reads clap's help text. Subcommands are the lines of the `Commands:`
/// section indented by two spaces (a wrapped description is indented
/// further); flags are the lines indented by at most six spaces that start
/// with `-` (wrapped descriptions and possible values are indented further).
fn parse_help(text: &str) -> Help {
    let mut commands = Vec::new();
    let mut flags = Vec::new();
    let mut section = "";
    let mut usage = String::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if indent == 0 && !line.is_empty() {
            section = line.split(':').next().unwrap_or("");
            if section == "Usage" {
                usage.push_str(line);
            }
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if section == "Usage" {
            usage.push_str(line);
        } else if section == "Commands" && indent == 2 && first != "help" {
            commands.push(first.to_string());
        } else if (2..=6).contains(&indent) && first.starts_with('-') {
            let long = line
                .split_whitespace()
                .find(|w| w.starts_with("--"))
                .map(|w| w.trim_end_matches(','));
            if let Some(flag) = long.filter(|f| !CLAP_FLAGS.contains(f)) {
                flags.push(flag.to_string());
            }
        }
    }
    Help {
        commands,
        flags,
        needs_command: usage.contains("<COMMAND>"),
    }
}

/// Every subcommand of `exe`, the binary itself first, through nested ones.
fn walk(exe: &str) -> Vec<Sub> {
    let mut subs = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let help = parse_help(&help(exe, &path));
        for command in &help.commands {
            let mut next = path.clone();
            next.push(command.clone());
            todo.push(next);
        }
        subs.push(Sub {
            runnable: help.commands.is_empty() || !help.needs_command,
            path,
            flags: help.flags,
        });
    }
    subs.sort_by(|a, b| a.path.cmp(&b.path));
    subs
}

/// The text between the first pair of backticks.
fn first_code_span(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once('`')?;
    Some(rest.split_once('`')?.0)
}

/// `tidemill-{cloud,edge}` as `tidemill-cloud` and `tidemill-edge`.
fn expand(word: &str) -> Vec<String> {
    match word.split_once('{').and_then(|(pre, rest)| {
        let (alts, post) = rest.split_once('}')?;
        Some((pre, alts, post))
    }) {
        Some((pre, alts, post)) => alts.split(',').map(|a| format!("{pre}{a}{post}")).collect(),
        None => vec![word.to_string()],
    }
}

/// The `--flag`s a text writes, each whole (`--data-dir` is not `--data`).
fn flags_in(text: &str) -> HashSet<String> {
    let is_flag_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut found = HashSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("--") {
        let before = rest[..i].chars().next_back();
        let name: String = rest[i + 2..]
            .chars()
            .take_while(|&c| is_flag_char(c))
            .collect();
        if !before.is_some_and(is_flag_char) && name.starts_with(|c: char| c.is_alphanumeric()) {
            found.insert(format!("--{name}"));
        }
        rest = &rest[i + 2 + name.len()..];
    }
    found
}

/// An entry of the doc: the command its first `code` span names, and its
/// text with the sections it links to.
struct Entry {
    binaries: Vec<String>,
    words: Vec<String>,
    shown_flags: HashSet<String>,
    text: String,
}

/// The doc read as entries.
struct Doc<'a> {
    lines: Vec<&'a str>,
    prose: HashSet<usize>,
    headings: Vec<markdown::Heading>,
}

impl<'a> Doc<'a> {
    fn new(text: &'a str) -> Self {
        Doc {
            lines: text.lines().collect(),
            prose: prose_lines(text).into_iter().map(|(n, _)| n).collect(),
            headings: headings(text),
        }
    }

    /// The prose of heading `i`'s section: its line up to the next heading
    /// as deep or shallower.
    fn section(&self, i: usize) -> Vec<&'a str> {
        let h = &self.headings[i];
        let end = self.headings[i + 1..]
            .iter()
            .find(|next| next.level <= h.level)
            .map_or(self.lines.len() + 1, |next| next.line);
        (h.line..end)
            .filter(|n| self.prose.contains(n))
            .map(|n| self.lines[n - 1])
            .collect()
    }

    /// `lines` and, through every `#anchor` link in them, the sections they
    /// point at, each once.
    fn with_links(&self, lines: Vec<&'a str>, seen: &mut HashSet<String>) -> String {
        let mut text = lines.join("\n");
        for target in lines.iter().flat_map(|l| link_targets(l)) {
            let Some(anchor) = target.strip_prefix('#') else {
                continue;
            };
            if !seen.insert(anchor.to_string()) {
                continue;
            }
            if let Some(i) = self.headings.iter().position(|h| h.anchor == anchor) {
                text.push('\n');
                text.push_str(&self.with_links(self.section(i), seen));
            }
        }
        text
    }

    fn entry(&self, command: &str, lines: Vec<&'a str>) -> Option<Entry> {
        let mut words = command.split_whitespace().map(str::to_string);
        let binaries = expand(&words.next()?);
        if !binaries
            .iter()
            .any(|b| BINARIES.iter().any(|(n, _)| n == b))
        {
            return None;
        }
        Some(Entry {
            binaries,
            words: words.collect(),
            shown_flags: flags_in(command),
            text: self.with_links(lines, &mut HashSet::new()),
        })
    }

    /// Every table row and heading that names a command.
    fn entries(&self) -> Vec<Entry> {
        let rows = self.prose.iter().filter_map(|&n| {
            let line = self.lines[n - 1];
            let command = first_code_span(line).filter(|_| line.trim_start().starts_with('|'))?;
            self.entry(command, vec![line])
        });
        let sections = self
            .headings
            .iter()
            .enumerate()
            .filter_map(|(i, h)| self.entry(first_code_span(&h.text)?, self.section(i)));
        rows.collect::<Vec<_>>()
            .into_iter()
            .chain(sections)
            .collect()
    }
}

/// What the doc lacks or gets wrong, one line each, for `binaries` (each
/// name with its subcommands).
fn undocumented(doc: &str, binaries: &[(&str, Vec<Sub>)]) -> Vec<String> {
    let doc = Doc::new(doc);
    let entries = doc.entries();
    let mut problems = Vec::new();
    for (name, subs) in binaries {
        // Each entry belongs to the longest subcommand path its words start with.
        let owner = |entry: &Entry| {
            subs.iter()
                .filter(|s| entry.words.starts_with(&s.path))
                .max_by_key(|s| s.path.len())
                .map(|s| s.path.clone())
        };
        for sub in subs {
            let shown = format!("{name} {}", sub.path.join(" "));
            let shown = shown.trim_end();
            let mine: Vec<&Entry> = entries
                .iter()
                .filter(|e| e.binaries.iter().any(|b| b == name))
                .filter(|e| owner(e).as_ref() == Some(&sub.path))
                .collect();
            for e in &mine {
                let mut stale: Vec<_> = e
                    .shown_flags
                    .iter()
                    .filter(|f| !sub.flags.contains(f) && !CLAP_FLAGS.contains(&f.as_str()))
                    .collect();
                stale.sort();
                for flag in stale {
                    problems.push(format!(
                        "{shown}: its entry shows {flag}, which `{shown} --help` does not list"
                    ));
                }
            }
            if !sub.runnable {
                continue;
            }
            if mine.is_empty() {
                problems.push(format!(
                    "{shown}: no entry (a table row or heading whose first `code` starts with `{shown}`)"
                ));
                continue;
            }
            let written: HashSet<String> = mine.iter().flat_map(|e| flags_in(&e.text)).collect();
            for flag in sub.flags.iter().filter(|f| !written.contains(*f)) {
                problems.push(format!(
                    "{shown}: {flag} is not in its entry (nor in a section it links to)"
                ));
            }
        }
    }
    problems
}

#[test]
fn every_subcommand_and_flag_of_every_binary_is_in_cli_md() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent: the repository root");
    let doc = std::fs::read_to_string(root.join("docs/cli.md")).expect("read docs/cli.md");
    let binaries: Vec<(&str, Vec<Sub>)> = BINARIES
        .iter()
        .map(|&(name, exe)| (name, walk(exe)))
        .collect();
    for (name, subs) in &binaries {
        assert!(
            subs.len() > 3,
            "{name} --help listed too few subcommands to be read right: {subs:#?}"
        );
    }
    let problems = undocumented(&doc, &binaries);
    assert!(
        problems.is_empty(),
        "docs/cli.md does not match the binaries' --help; document each in docs/cli.md \
         (a row or heading per subcommand, every flag in it):\n{}",
        problems.join("\n")
    );
}

fn sub(path: &[&str], flags: &[&str], runnable: bool) -> Sub {
    Sub {
        path: path.iter().map(|s| s.to_string()).collect(),
        flags: flags.iter().map(|s| s.to_string()).collect(),
        runnable,
    }
}

#[test]
fn a_missing_entry_a_missing_flag_and_a_stale_flag_are_each_reported() {
    let subs = || {
        vec![
            sub(&[], &[], false),
            sub(&["nodes"], &["--json", "--api"], true),
            sub(&["nodes", "drain"], &["--api"], true),
            sub(&["jobs"], &[], false),
            sub(&["jobs", "wait"], &["--timeout-secs", "--api"], true),
            sub(&["print-default-config"], &[], true),
        ]
    };
    let doc = "# CLI\n\n## Client flags\n\n`--api URL` is the API.\n\n\
        | command | what |\n|---|---|\n\
        | `tidemill-cloud nodes [--json]` | lists; [client flags](#client-flags) |\n\
        | `tidemill-cloud nodes drain ID` | drains; [client flags](#client-flags) |\n\
        | `tidemill-{cloud,edge} print-default-config` | prints |\n\
        ### `tidemill-cloud jobs wait ID [--timeout-secs S]`\n\nwaits, with --api\n";
    let binaries = [("tidemill-cloud", subs())];
    assert_eq!(undocumented(doc, &binaries), Vec::<String>::new());

    let cases = [
        (
            doc.replace(
                "| `tidemill-cloud nodes drain ID` |",
                "| `tidemill-cloud nodes` |",
            ),
            "tidemill-cloud nodes drain: no entry (a table row or heading whose first `code` starts with `tidemill-cloud nodes drain`)",
        ),
        (
            doc.replace("lists; [client flags](#client-flags)", "lists"),
            "tidemill-cloud nodes: --api is not in its entry (nor in a section it links to)",
        ),
        (
            doc.replace("```", "")
                .replace("waits, with --api", "waits\n```\n--api\n```"),
            "tidemill-cloud jobs wait: --api is not in its entry (nor in a section it links to)",
        ),
        (
            doc.replace("[--json]", "[--json] [--jsn]"),
            "tidemill-cloud nodes: its entry shows --jsn, which `tidemill-cloud nodes --help` does not list",
        ),
    ];
    for (changed, problem) in cases {
        assert_eq!(undocumented(&changed, &binaries), [problem], "{changed}");
    }
}

#[test]
fn a_flag_counts_only_whole() {
    let found = flags_in("`--data-dir D`, --json; [--api-token T] and ---x or a--b");
    let want: HashSet<String> = ["--data-dir", "--json", "--api-token"]
        .map(String::from)
        .into();
    assert_eq!(found, want);
}

#[test]
fn help_is_read_through_claps_wrapping() {
    let text = "List nodes, or drain one\n\n\
        Usage: tidemill-cloud nodes [OPTIONS]\n          [COMMAND]\n\n\
        Commands:\n  drain     Place nothing new on a node, and\n            have the jobs move (see\n            nodes drain --help)\n  help      Print this message\n\n\
        Options:\n      --api <API>\n          The coordinator's API; a bare\n          --api-token is not a flag line\n\n          Possible values:\n          - json: --x\n  -j, --json  Print JSON\n  -h, --help  Print help\n";
    assert_eq!(
        parse_help(text),
        Help {
            commands: vec!["drain".into()],
            flags: vec!["--api".into(), "--json".into()],
            needs_command: false,
        }
    );
    let required = "Usage: tidemill-cloud jobs\n       <COMMAND>\n\nCommands:\n  wait  Wait\n";
    assert!(parse_help(required).needs_command);
}
