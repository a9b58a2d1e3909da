//! The VS Code extension's TextMate grammar (`editor/vscode/syntaxes/gantry.tmLanguage.json`)
//! run over every policy in the repository: a small TextMate tokenizer (first match
//! leftmost, ties to the earlier pattern; `begin`/`end` regions across lines; captures)
//! with fancy-regex, whose syntax covers what the grammar uses of Oniguruma. Token scopes
//! are snapshotted per file, and checked: comments, strings, block headers, rules, job
//! fields, quantities and keys get their scopes, and no text is left unscoped. The snippets
//! are expanded with their defaults and checked to parse.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use fancy_regex::Regex;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

enum Rule {
    Match {
        re: Regex,
        name: Option<String>,
        captures: Vec<(usize, String)>,
    },
    Region {
        begin: Regex,
        end: Regex,
        name: String,
        inner: Vec<Rule>,
    },
}

fn captures(v: &Value) -> Vec<(usize, String)> {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, c)| (k.parse().unwrap(), c["name"].as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn compile(v: &Value, repo: &Value) -> Vec<Rule> {
    if let Some(include) = v["include"].as_str() {
        let key = include.trim_start_matches('#');
        return compile(&repo[key], repo);
    }
    if let Some(m) = v["match"].as_str() {
        return vec![Rule::Match {
            re: Regex::new(m).unwrap_or_else(|e| panic!("{m}: {e}")),
            name: v["name"].as_str().map(str::to_string),
            captures: captures(&v["captures"]),
        }];
    }
    if let Some(b) = v["begin"].as_str() {
        return vec![Rule::Region {
            begin: Regex::new(b).unwrap(),
            end: Regex::new(v["end"].as_str().unwrap()).unwrap(),
            name: v["name"].as_str().unwrap().to_string(),
            inner: v["patterns"]
                .as_array()
                .map(|ps| ps.iter().flat_map(|p| compile(p, repo)).collect())
                .unwrap_or_default(),
        }];
    }
    v["patterns"]
        .as_array()
        .unwrap_or_else(|| panic!("a rule with no match, begin or patterns: {v}"))
        .iter()
        .flat_map(|p| compile(p, repo))
        .collect()
}

fn grammar() -> Vec<Rule> {
    let text =
        std::fs::read_to_string(repo().join("editor/vscode/syntaxes/gantry.tmLanguage.json"))
            .unwrap();
    let g: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(g["scopeName"], "source.gantry");
    g["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| compile(p, &g["repository"]))
        .collect()
}

/// The earliest match of any rule at or after `from`; ties go to the earlier rule.
fn first_match<'r, 't>(
    rules: &'r [Rule],
    line: &'t str,
    from: usize,
) -> Option<(usize, usize, &'r Rule, fancy_regex::Captures<'t>)> {
    let mut best: Option<(usize, usize, &Rule, fancy_regex::Captures<'_>)> = None;
    for rule in rules {
        let re = match rule {
            Rule::Match { re, .. } => re,
            Rule::Region { begin, .. } => begin,
        };
        if let Ok(Some(c)) = re.captures_from_pos(line, from) {
            let m = c.get(0).unwrap();
            if m.end() == m.start() {
                continue;
            }
            if best.as_ref().is_none_or(|(s, _, _, _)| m.start() < *s) {
                best = Some((m.start(), m.end(), rule, c));
            }
        }
    }
    best
}

/// Tokens `(text, scope)` of each line; `region` carries an open string across lines.
fn tokenize(rules: &[Rule], text: &str) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut open: Option<&Rule> = None;
    for line in text.lines() {
        let mut tokens: Vec<(String, String)> = Vec::new();
        let mut pos = 0;
        let plain = |tokens: &mut Vec<(String, String)>, s: &str| {
            for word in s.split_whitespace() {
                tokens.push((word.to_string(), "source.gantry".into()));
            }
        };
        while pos < line.len() {
            if let Some(Rule::Region {
                end, name, inner, ..
            }) = open
            {
                // Inside a region: inner patterns, or the end.
                let close = end.find_from_pos(line, pos).ok().flatten();
                let inner_m = first_match(inner, line, pos);
                match (close, inner_m) {
                    (Some(c), Some((s, e, _, _))) if s < c.start() => {
                        tokens.push((line[pos..e].to_string(), name.clone()));
                        pos = e;
                    }
                    (Some(c), _) => {
                        tokens.push((line[pos..c.end()].to_string(), name.clone()));
                        pos = c.end();
                        open = None;
                    }
                    (None, _) => {
                        tokens.push((line[pos..].to_string(), name.clone()));
                        pos = line.len();
                    }
                }
                continue;
            }
            let Some((start, end, rule, caps)) = first_match(rules, line, pos) else {
                plain(&mut tokens, &line[pos..]);
                break;
            };
            plain(&mut tokens, &line[pos..start]);
            match rule {
                Rule::Match { name, captures, .. } => {
                    if captures.is_empty() {
                        tokens.push((line[start..end].to_string(), name.clone().unwrap()));
                    } else {
                        let mut at = start;
                        for (group, scope) in captures {
                            if let Some(g) = caps.get(*group) {
                                plain(&mut tokens, &line[at.min(g.start())..g.start()]);
                                tokens.push((g.as_str().to_string(), scope.clone()));
                                at = g.end();
                            }
                        }
                        plain(&mut tokens, &line[at.min(end)..end]);
                    }
                    pos = end;
                }
                Rule::Region { name, .. } => {
                    tokens.push((line[start..end].to_string(), name.clone()));
                    pos = end;
                    open = Some(rule);
                }
            }
        }
        out.push(tokens);
    }
    out
}

fn policy_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for top in ["policies", "examples"] {
        let mut stack = vec![repo().join(top)];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "gantry") {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_policy_is_scoped() {
    let rules = grammar();
    let files = policy_files();
    assert!(files.len() >= 5);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = tokenize(&rules, &text);
        let rel = file.strip_prefix(repo()).unwrap().display().to_string();
        let mut rendered = String::new();
        for (n, tokens) in lines.iter().enumerate() {
            for (t, scope) in tokens {
                assert_ne!(
                    scope,
                    "source.gantry",
                    "{rel}:{}: `{t}` has no scope",
                    n + 1
                );
                if !t.trim().is_empty() {
                    rendered.push_str(&format!("{}: {t} => {scope}\n", n + 1));
                }
            }
        }
        if rel.starts_with("policies/") {
            insta::assert_snapshot!(
                format!("grammar_{}", rel.replace(['/', '.'], "_")),
                rendered
            );
        }
    }
}

#[test]
fn scopes_of_each_construct() {
    let rules = grammar();
    let text = "use std.nodes.{dgx_h100}\n# a comment\ntemplate team base from x { guaranteed = 8 gpu in training; max_wait = 90 m }\npool a { node = dgx_h100; window = weekdays 08:00..19:00 \"Europe/Berlin\" }\nrule big: deny if job.gpus > 64 gpu and not job.interactive \"too \\\"big\\\"\"\n";
    let lines = tokenize(&rules, text);
    let scope_of = |line: usize, token: &str| -> String {
        lines[line]
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no `{token}` on line {line}: {:?}", lines[line]))
    };
    assert_eq!(scope_of(0, "use"), "keyword.control.import.gantry");
    assert_eq!(scope_of(0, "std.nodes"), "entity.name.namespace.gantry");
    assert_eq!(
        scope_of(1, "# a comment"),
        "comment.line.number-sign.gantry"
    );
    assert_eq!(scope_of(2, "template"), "storage.modifier.template.gantry");
    assert_eq!(scope_of(2, "team"), "storage.type.block.gantry");
    assert_eq!(scope_of(2, "base"), "entity.name.type.gantry");
    assert_eq!(scope_of(2, "guaranteed"), "variable.other.property.gantry");
    assert_eq!(scope_of(2, "8"), "constant.numeric.gantry");
    assert_eq!(scope_of(2, "gpu"), "keyword.other.unit.gantry");
    assert_eq!(scope_of(2, "m"), "keyword.other.unit.gantry");
    // `node = ...` is a key, not a block header.
    assert_eq!(scope_of(3, "node"), "variable.other.property.gantry");
    assert_eq!(scope_of(3, "08:00"), "constant.numeric.time.gantry");
    let string_on = |line: usize| -> String {
        lines[line]
            .iter()
            .filter(|(_, s)| s == "string.quoted.double.gantry")
            .map(|(t, _)| t.as_str())
            .collect()
    };
    assert_eq!(string_on(3), "\"Europe/Berlin\"");
    assert_eq!(scope_of(3, "weekdays"), "variable.other.gantry");
    assert_eq!(scope_of(4, "rule"), "storage.type.rule.gantry");
    assert_eq!(scope_of(4, "big"), "entity.name.function.rule.gantry");
    assert_eq!(scope_of(4, "deny"), "keyword.control.gantry");
    assert_eq!(scope_of(4, "job"), "variable.language.job.gantry");
    assert_eq!(scope_of(4, "gpus"), "variable.other.member.gantry");
    assert_eq!(scope_of(4, "and"), "keyword.operator.logical.gantry");
    // An escaped quote does not end the string.
    assert_eq!(string_on(4), "\"too \\\"big\\\"\"");
}

#[test]
fn snippets_expand_to_policies_that_parse() {
    let text = std::fs::read_to_string(repo().join("editor/vscode/snippets/gantry.json")).unwrap();
    let snippets: Value = serde_json::from_str(&text).unwrap();
    let choice = Regex::new(r"\$\{\d+\|([^,|]+)[^}]*\|\}").unwrap();
    let placeholder = Regex::new(r"\$\{\d+:([^}]*)\}").unwrap();
    for (name, s) in snippets.as_object().unwrap() {
        let body: Vec<&str> = s["body"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        let body = body.join("\n");
        let body = choice.replace_all(&body, "$1");
        let body = placeholder.replace_all(&body, "$1");
        let (_, diags) = lang::syntax::parse(0, &body);
        assert!(
            diags.is_empty(),
            "snippet {name} expands to:\n{body}\n{diags:?}"
        );
    }
}

#[test]
fn the_extension_manifest_points_at_real_files() {
    let dir = repo().join("editor/vscode");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("package.json")).unwrap()).unwrap();
    assert!(dir.join(manifest["main"].as_str().unwrap()).is_file());
    let contributes = &manifest["contributes"];
    let language = &contributes["languages"][0];
    assert_eq!(language["id"], "gantry");
    assert_eq!(language["extensions"][0], ".gantry");
    for path in [
        &language["configuration"],
        &contributes["grammars"][0]["path"],
        &contributes["snippets"][0]["path"],
    ] {
        let file = dir.join(path.as_str().unwrap());
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    assert_eq!(contributes["grammars"][0]["scopeName"], "source.gantry");
    let client = std::fs::read_to_string(dir.join("extension.js")).unwrap();
    assert!(
        client.contains("args: ['lsp']"),
        "the client starts `gantry lsp`"
    );
}
