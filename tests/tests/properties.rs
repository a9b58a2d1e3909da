//! Property tests beside the cargo-fuzz targets in `lang/fuzz` (which need nightly):
//! mutated and random inputs never panic any stage, and a plain check reports and lowers
//! what an editor's does; `fmt` is idempotent; `fmt` preserves meaning (the same IR before
//! and after).

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

use proptest::prelude::*;
use std::path::Path;

/// Every bundled `.gantry` text: policies, stdlib and the language cases.
fn corpus() -> &'static [String] {
    static CORPUS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(load_corpus)
}

fn load_corpus() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let mut out: Vec<String> = stdlib::MODULES
        .iter()
        .map(|(_, t)| (*t).to_string())
        .collect();
    let mut stack = vec![
        root.join("policies"),
        root.join("tests/cases"),
        root.join("examples"),
    ];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
        {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "gantry") {
                out.push(std::fs::read_to_string(p).unwrap());
            }
        }
    }
    out.sort();
    out
}

/// Policies that check clean on their own.
fn clean_corpus() -> &'static [String] {
    static CLEAN: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CLEAN.get_or_init(|| {
        corpus()
            .iter()
            .filter(|t| {
                lang::check(&[("p.gantry".into(), (*t).clone())])
                    .diagnostics
                    .is_empty()
            })
            .cloned()
            .collect()
    })
}

const FRAGMENTS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "=",
    "==",
    "..",
    ":",
    ";",
    ",",
    "\"",
    "#",
    "\n",
    " ",
    "8",
    "0.5",
    "500m gpu",
    "gpu",
    "GiB",
    "GB",
    "2h",
    "15m",
    "$/h",
    "%",
    "08:00",
    "25:61",
    "pool",
    "tier",
    "team",
    "cohort",
    "rule",
    "deny if",
    "route if",
    "warn if",
    "use std.",
    "job.",
    "and",
    "or",
    "not",
    "in",
    "none",
    "self",
    "clamp",
    "template",
    "from",
    "=>",
    "up when",
    "down when",
    "mig",
    "\u{e9}",
    "\u{1f680}",
    "\\",
    "\t",
    "-",
    "*",
    "/",
];

#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, usize),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0..FRAGMENTS.len()).prop_map(|(at, f)| Mutation::Insert(at, f)),
        (any::<usize>(), 1usize..40).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (any::<usize>(), 1usize..80).prop_map(|(at, n)| Mutation::Duplicate(at, n)),
    ]
}

fn boundary(text: &str, at: usize) -> usize {
    let mut i = at % (text.len() + 1);
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(mut text: String, mutations: &[Mutation]) -> String {
    for m in mutations {
        match *m {
            Mutation::Insert(at, f) => {
                let i = boundary(&text, at);
                text.insert_str(i, FRAGMENTS[f]);
            }
            Mutation::Delete(at, n) => {
                let i = boundary(&text, at);
                let j = boundary(&text, i + n);
                text.replace_range(i..j.max(i), "");
            }
            Mutation::Duplicate(at, n) => {
                let i = boundary(&text, at);
                let j = boundary(&text, i + n).max(i);
                let piece = text[i..j].to_string();
                text.insert_str(j, &piece);
            }
        }
    }
    text
}

/// Re-lays out a policy without changing its tokens: spacing, tabs, blank lines and
/// end-of-line comments, outside strings and comments.
fn relayout(text: &str, seed: &[u8]) -> String {
    let mut out = String::new();
    let mut k = 0usize;
    let mut next = || {
        k += 1;
        seed.get(k % seed.len().max(1)).copied().unwrap_or(0)
    };
    let (mut in_string, mut in_comment) = (false, false);
    for c in text.chars() {
        match c {
            '"' if !in_comment => in_string = !in_string,
            '#' if !in_string => in_comment = true,
            '\n' => {
                in_comment = false;
                in_string = false;
            }
            _ => {}
        }
        if !in_string && !in_comment && c == ' ' {
            out.push_str(match next() % 4 {
                0 => "  ",
                1 => "\t",
                _ => " ",
            });
        } else if !in_string && c == '\n' {
            if !in_comment && next() % 7 == 0 {
                out.push_str("  # note");
            }
            out.push('\n');
            if next() % 5 == 0 {
                out.push('\n');
            }
        } else {
            out.push(c);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tests::cases(200), ..ProptestConfig::default() })]

    #[test]
    fn no_stage_panics_on_mutated_policies(pick in any::<prop::sample::Index>(), mutations in prop::collection::vec(mutation(), 1..8)) {
        let corpus = corpus();
        let text = apply(pick.get(corpus).clone(), &mutations);
        let checked = lang::check(&[("fuzz.gantry".into(), text.clone())]);
        for d in &checked.diagnostics {
            let _ = d.render(&checked.sources, false);
            let _ = d.to_json(&checked.sources);
        }
        // A plain check frees the tree as it lowers it; an editor's keeps it whole.
        let editor = lang::check_for_editor(&[("fuzz.gantry".into(), text.clone())]);
        prop_assert_eq!(&checked.diagnostics, &editor.diagnostics, "on:\n{}", text);
        prop_assert_eq!(&checked.program, &editor.program, "on:\n{}", text);
        if let Ok(formatted) = lang::format::format_source(&text) {
            let again = lang::format::format_source(&formatted);
            prop_assert_eq!(again.as_ref().ok(), Some(&formatted), "fmt is not idempotent on:\n{}", text);
        }
    }

    #[test]
    fn no_stage_panics_on_token_soup(tokens in prop::collection::vec(0..FRAGMENTS.len(), 0..120)) {
        let text: String = tokens.iter().map(|t| FRAGMENTS[*t]).collect::<Vec<_>>().join(" ");
        let checked = lang::check(&[("soup.gantry".into(), text.clone())]);
        for d in &checked.diagnostics {
            let _ = d.render(&checked.sources, false);
        }
        if let Ok(formatted) = lang::format::format_source(&text) {
            prop_assert_eq!(lang::format::format_source(&formatted).ok(), Some(formatted));
        }
    }

    #[test]
    fn fmt_preserves_meaning_and_is_idempotent(pick in any::<prop::sample::Index>(), seed in prop::collection::vec(any::<u8>(), 1..64)) {
        let corpus = clean_corpus();
        let original = pick.get(corpus).clone();
        let relaid = relayout(&original, &seed);
        let before = lang::check(&[("p.gantry".into(), relaid.clone())]);
        prop_assert!(before.diagnostics.is_empty(), "relayout changed meaning: {:?}", before.diagnostics.first());
        let formatted = lang::format::format_source(&relaid).unwrap();
        let after = lang::check(&[("p.gantry".into(), formatted.clone())]);
        prop_assert!(after.diagnostics.is_empty(), "formatted text fails: {:?}\n{}", after.diagnostics.first(), formatted);
        prop_assert_eq!(&before.program, &after.program, "IR differs after fmt:\n{}", formatted);
        let reference = lang::check(&[("p.gantry".into(), original.clone())]);
        prop_assert_eq!(&reference.program, &after.program);
        prop_assert_eq!(lang::format::format_source(&formatted).unwrap(), formatted);
    }
}

/// Conditions of admission rules, for the comment-placement property.
const RULE_ATOMS: &[&str] = &[
    "job.gpus > 8 gpu",
    "job.tier == best_effort",
    "job.team == research",
    "not job.gpus <= 1 gpu",
    "(job.gpus > 2 gpu or job.team == research)",
    "job.spot_interruptions >= 2",
];

/// What may separate two tokens of a rule: spaces, line breaks, a comment ending the
/// line, a comment on a line of its own.
const RULE_GAPS: &[&str] = &[
    " ",
    "\n  ",
    " # after\n  ",
    "\n  # own line\n  ",
    " # a\n  # b\n  ",
];

/// A policy with rules whose conditions span lines with comments anywhere between tokens.
fn commented_rules(picks: &[(usize, usize, usize, bool)], tail: usize) -> String {
    let mut text = String::from(
        "use std.tiers\nuse std.nodes.{dgx_h100}\nteam research { guaranteed = 8 gpu }\npool spot { capacity = spot; node = dgx_h100; nodes = 0..2 }\n",
    );
    for (i, chunk) in picks.chunks(3).enumerate() {
        let route = chunk.first().is_some_and(|c| c.3);
        text.push_str(&format!(
            "rule r{i}: {} if ",
            if route { "route" } else { "deny" }
        ));
        for (k, (atom, op_gap, gap, and)) in chunk.iter().enumerate() {
            if k > 0 {
                text.push_str(RULE_GAPS[*op_gap % RULE_GAPS.len()]);
                text.push_str(if *and { "and" } else { "or" });
                text.push_str(RULE_GAPS[*gap % RULE_GAPS.len()]);
            }
            text.push_str(RULE_ATOMS[*atom % RULE_ATOMS.len()]);
        }
        text.push_str(RULE_GAPS[tail % RULE_GAPS.len()]);
        if route {
            text.push_str("to spot");
            text.push_str(RULE_GAPS[(tail + i) % RULE_GAPS.len()]);
        }
        text.push_str(&format!("\"message {i}\""));
        if (tail + i).is_multiple_of(2) {
            text.push_str(" # trailing");
        }
        text.push('\n');
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: tests::cases(300), ..ProptestConfig::default() })]

    /// Issue 16, item 7: comments inside a multi-line rule condition once moved below the
    /// rule, where a second pass printed them differently.
    #[test]
    fn fmt_is_idempotent_with_comments_inside_rules(
        picks in prop::collection::vec((0..6usize, 0..5usize, 0..5usize, any::<bool>()), 1..10),
        tail in 0..5usize,
    ) {
        let text = commented_rules(&picks, tail);
        let before = lang::check(&[("p.gantry".into(), text.clone())]);
        prop_assert!(before.diagnostics.iter().all(|d| !d.is_error()), "generated policy fails: {:?}\n{}", before.diagnostics.first(), text);
        let formatted = lang::format::format_source(&text).unwrap();
        let after = lang::check(&[("p.gantry".into(), formatted.clone())]);
        prop_assert_eq!(&before.program, &after.program, "IR differs after fmt:\n{}", formatted);
        let comments = |t: &str| t.matches('#').count();
        prop_assert_eq!(comments(&text), comments(&formatted), "a comment was lost:\n{}", formatted);
        prop_assert_eq!(lang::format::format_source(&formatted).unwrap(), formatted.clone(), "fmt is not idempotent on:\n{}", text);
    }
}

#[test]
fn deep_and_long_inputs_do_not_overflow_the_stack() {
    for text in [
        format!(
            "rule r: deny if {}true{} \"x\"",
            "(".repeat(100_000),
            ")".repeat(100_000)
        ),
        format!("rule r: deny if {}", "not ".repeat(100_000)),
        format!(
            "rule r: deny if job.gpus > 1 gpu{} \"x\"",
            " + 1 gpu".repeat(100_000)
        ),
        "[".repeat(200_000),
        "pool p {".repeat(50_000),
        "\"".repeat(100_001),
    ] {
        let checked = lang::check(&[("deep.gantry".into(), text)]);
        assert!(checked.has_errors());
    }
}
