//! Text to syntax tree. Parsing never fails outright: it returns the items it could build and
//! a diagnostic for every broken top-level item, resuming at the next one.

use super::ast::*;
use super::scan;
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::source::{FileId, Span};
use pest::iterators::Pair;
use pest::pratt_parser::{Assoc, Op, PrattParser};
use pest::Parser as _;

mod grammar {
    #![allow(
        clippy::all,
        clippy::pedantic,
        clippy::nursery,
        missing_debug_implementations
    )]
    #[derive(pest_derive::Parser)]
    #[grammar = "gantry.pest"]
    pub struct GantryParser;
}
use grammar::{GantryParser, Rule};

/// Most operators one expression may hold; deeper trees risk the stack in later stages.
pub const MAX_OPERATORS: usize = 256;
/// Syntax errors reported per file before giving up on the rest.
const MAX_SYNTAX_ERRORS: usize = 50;

/// Parses one file. Spans in the tree and diagnostics carry `file`.
pub fn parse(file: FileId, text: &str) -> (File, Vec<Diagnostic>) {
    let scanned = scan::scan(file, text);
    let mut diags = Vec::new();
    let mut items = Vec::new();
    let mut broken = Vec::new();
    let clean = scanned.unterminated.is_empty() && scanned.too_deep.is_empty();
    let whole = clean
        && (parse_in_parts(file, text, &mut items, &mut diags)
            || parse_chunk(file, text, 0..text.len(), &mut items, &mut diags));
    if !whole {
        items.clear();
        diags.clear();
        let mut errors = 0;
        for chunk in scan::chunks(text) {
            if errors >= MAX_SYNTAX_ERRORS {
                diags.push(
                    Diagnostic::new(
                        codes::SYNTAX,
                        "too many syntax errors; stopped parsing this file",
                    )
                    .with_label(
                        Span::new(file, chunk.start, chunk.start),
                        "parsing stopped here",
                    )
                    .with_help("fix the errors above and run the check again"),
                );
                break;
            }
            let in_chunk = |s: &Span| chunk.contains(&(s.start as usize));
            if let Some(s) = scanned.unterminated.iter().find(|s| in_chunk(s)) {
                diags.push(
                    Diagnostic::new(codes::UNTERMINATED_STRING, "unterminated string")
                        .with_label(*s, "this string is not closed before the end of the line")
                        .with_help("add the closing `\"`; strings cannot span lines"),
                );
                errors += 1;
                continue;
            }
            if let Some(s) = scanned.too_deep.iter().find(|s| in_chunk(s)) {
                diags.push(
                    Diagnostic::new(
                        codes::TOO_DEEP,
                        format!("brackets nest more than {} levels deep", scan::MAX_DEPTH),
                    )
                    .with_label(*s, "too deep here")
                    .with_help("flatten the expression; split long conditions into several rules"),
                );
                errors += 1;
                continue;
            }
            let before = diags.len();
            if !parse_chunk(file, text, chunk.clone(), &mut items, &mut diags) {
                let src = text.get(chunk.clone()).unwrap_or_default();
                broken.extend(scan::names_defined_in(src));
                if let Some(d) = diags.last_mut() {
                    unclosed_block(file, chunk.start, src, chunk.end == text.len(), d);
                }
            }
            errors += diags.len() - before;
        }
    }
    let mut ast = File {
        items,
        dangling: Vec::new(),
        broken,
    };
    super::trivia::attach(&mut ast, scanned.comments, text);
    if ast.items.is_empty() && diags.is_empty() {
        let end = text.len();
        diags.push(
            Diagnostic::new(codes::EMPTY_FILE, "this policy file defines nothing")
                .with_label(Span::new(file, 0, end.min(1)), "no definitions in this file")
                .with_help("add a definition such as `tier standard { priority = 500 }`, or delete the file"),
        );
    }
    (ast, diags)
}

/// A clean file larger than this is parsed in parts of about this size, each a run of
/// whole top-level chunks: pest keeps a token queue of about 40 bytes per token for the
/// text it parses, which for a whole 10 MB policy came to 40× the file.
const PART_BYTES: usize = 64 * 1024;

/// Parses a large file part by part; `false` (with `items` and `diags` left empty) when
/// the file is small or a part does not parse on its own, e.g. because a line inside a
/// block starts with an item keyword. The parts then mean nothing and the whole file is
/// parsed as one.
fn parse_in_parts(
    file: FileId,
    text: &str,
    items: &mut Vec<Item>,
    diags: &mut Vec<Diagnostic>,
) -> bool {
    if text.len() <= PART_BYTES {
        return false;
    }
    let mut part_start = 0;
    let chunks = scan::chunks(text);
    // About one item per chunk: sized once rather than grown by doubling, as the tree of a
    // large policy is held to the end of the check.
    items.reserve_exact(chunks.len());
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        if !last && chunk.end - part_start < PART_BYTES {
            continue;
        }
        if !parse_chunk(file, text, part_start..chunk.end, items, diags) || !diags.is_empty() {
            items.clear();
            diags.clear();
            return false;
        }
        part_start = chunk.end;
    }
    true
}

/// Parses `text[range]` as a sequence of items; returns whether it parsed cleanly.
fn parse_chunk(
    file: FileId,
    text: &str,
    range: std::ops::Range<usize>,
    items: &mut Vec<Item>,
    diags: &mut Vec<Diagnostic>,
) -> bool {
    let Some(src) = text.get(range.clone()) else {
        return false;
    };
    match GantryParser::parse(Rule::file, src) {
        Ok(mut pairs) => {
            let mut b = Builder {
                file,
                offset: range.start,
                diags,
            };
            let top = pairs.next().map(|f| f.into_inner());
            for pair in top.into_iter().flatten().filter(|p| is_item(p.as_rule())) {
                if let Some(item) = b.item(pair) {
                    items.push(item);
                }
            }
            true
        }
        Err(e) => {
            let last = range.end == text.len();
            diags.push(syntax_error(file, range.start, src, last, &e));
            false
        }
    }
}

fn is_item(rule: Rule) -> bool {
    matches!(rule, Rule::use_decl | Rule::rule_decl | Rule::block)
}

/// The diagnostic for pest's error `e` in `src` (at `offset` in the file; `last` when
/// `src` runs to the end of the file).
fn syntax_error(
    file: FileId,
    offset: usize,
    src: &str,
    last: bool,
    e: &pest::error::Error<Rule>,
) -> Diagnostic {
    let pos = match e.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((s, _)) => s,
    };
    let found = src
        .get(pos..)
        .and_then(|r| r.split_whitespace().next())
        .map(|t| t.chars().take(20).collect::<String>());
    let expected = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            let mut names: Vec<&str> = positives.iter().filter_map(|r| rule_name(*r)).collect();
            names.sort_unstable();
            names.dedup();
            names
        }
        pest::error::ErrorVariant::CustomError { .. } => Vec::new(),
    };
    // A chunk that fails on its first word (`tem vision {`) names no rule pest could see.
    let at_start = src.get(..pos).is_some_and(|before| {
        before.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#')
        })
    });
    let expected = if expected.is_empty() && at_start {
        rule_name(Rule::item).into_iter().collect()
    } else {
        expected
    };
    let expected_text = match expected.as_slice() {
        [] => String::from("valid syntax"),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    };
    let message = match &found {
        Some(t) => format!("expected {expected_text}, found `{t}`"),
        None if last => format!("expected {expected_text}, found the end of the file"),
        None => format!("expected {expected_text}, found the next definition"),
    };
    let is_rule = src.trim_start().starts_with("rule ");
    let len = found.as_ref().map_or(0, |t| t.len());
    let typo = found
        .as_deref()
        .filter(|_| expected.iter().any(|e| e.starts_with("a definition")))
        .and_then(|t| crate::suggest::closest(t, scan::ITEM_KEYWORDS));
    let help = if let Some(word) = typo {
        format!("did you mean `{word}`?")
    } else if found.as_deref().is_some_and(|t| t.starts_with(',')) {
        "to give several values, write a list in brackets: `[8 gpu in dgx, 4 gpu in spot]`"
            .to_string()
    } else if found.is_none() && is_rule {
        "a rule ends with its message in quotes: `rule NAME: deny if CONDITION \"why\"`".to_string()
    } else if found.is_none() {
        "a block may be missing its closing `}`".to_string()
    } else if expected == ["`=`"] {
        "a field is written `name = value`, e.g. `guaranteed = 8 gpu`".to_string()
    } else if expected.contains(&"a value") {
        "a field is written `name = value`, e.g. `priority = 500` or `guaranteed = 8 gpu`"
            .to_string()
    } else {
        "see `gantry explain E0101` and the language tour in README.md".to_string()
    };
    // Cut off by the next definition: point where the missing text goes, after the last
    // word of this one, not at the next definition.
    let (at, label) = if found.is_none() && !last {
        let end = offset + src.trim_end().len();
        let what = if is_rule {
            "the rule's message goes here"
        } else {
            "expected more here"
        };
        (Span::new(file, end, end), what)
    } else {
        (
            Span::new(file, offset + pos, offset + pos + len),
            "unexpected here",
        )
    };
    let d = Diagnostic::new(codes::SYNTAX, message)
        .with_label(at, label)
        .with_help(help);
    match typo {
        Some(word)
            if found
                .as_deref()
                .is_some_and(|t| t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) =>
        {
            d.with_fix(at, word)
        }
        // `guaranteed 8 gpu`: the `=` goes before the value.
        _ if expected == ["`=`"] && found.is_some() => {
            d.with_fix(Span::new(file, at.start as usize, at.start as usize), "= ")
        }
        _ => d,
    }
}

/// Turns the syntax error `d` of a chunk (at `offset`, text `src`) with more `{` than `}`
/// into "this `{` is never closed" at the opening brace, when the parser stopped at or
/// after it: the end of the chunk is where the parser noticed, not where the mistake is.
fn unclosed_block(file: FileId, offset: usize, src: &str, last: bool, d: &mut Diagnostic) {
    let Some(brace) = scan::unclosed_brace(src) else {
        return;
    };
    let stopped = d.primary_span().map_or(offset, |s| s.start as usize);
    if stopped < offset + brace {
        return;
    }
    let line_start = src
        .get(..brace)
        .and_then(|s| s.rfind('\n'))
        .map_or(0, |i| i + 1);
    let opener = src
        .get(line_start..brace)
        .and_then(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map_or_else(|| "block".to_string(), |w| format!("`{w}` block"));
    let mut closed = Diagnostic::new(codes::SYNTAX, "this `{` is never closed")
        .with_label(
            Span::new(file, offset + brace, offset + brace + 1),
            format!("this {opener} is never closed"),
        )
        .with_help(format!(
            "add `}}` where the {opener} ends; the parser reached {} without finding it",
            match (stopped >= offset + src.trim_end().len(), last) {
                (true, true) => "the end of the file",
                (true, false) => "the next definition",
                (false, _) => "the point marked",
            }
        ));
    if let Some(s) = d.primary_span() {
        closed = closed.with_label(s, "the parser gave up here");
    }
    *d = closed;
}

/// What a grammar rule is called in an error message; `None` hides the rule.
fn rule_name(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::EOI => "the end of the file",
        Rule::use_decl | Rule::rule_decl | Rule::block | Rule::item | Rule::kw_template => {
            "a definition (`pool`, `tier`, `team`, `rule`, ...)"
        }
        Rule::block_kind => "a block kind (`pool`, `tier`, `team`, ...)",
        Rule::ident | Rule::word | Rule::key | Rule::name_expr | Rule::field | Rule::block_name => {
            "a name"
        }
        Rule::assign | Rule::trigger | Rule::trigger_dir => "a field",
        Rule::value
        | Rule::expr
        | Rule::range_tail
        | Rule::clamp
        | Rule::primary
        | Rule::quantity
        | Rule::number
        | Rule::call_args
        | Rule::list
        | Rule::paren
        | Rule::string
        | Rule::bool_lit
        | Rule::none_lit
        | Rule::self_lit
        | Rule::time_of_day
        | Rule::windows
        | Rule::window
        | Rule::day_spec
        | Rule::prefix
        | Rule::op_neg
        | Rule::op_not => "a value",
        Rule::infix
        | Rule::op_or
        | Rule::op_and
        | Rule::op_eq
        | Rule::op_ne
        | Rule::op_le
        | Rule::op_ge
        | Rule::op_lt
        | Rule::op_gt
        | Rule::op_add
        | Rule::op_sub
        | Rule::op_mul
        | Rule::op_div
        | Rule::op_in => "an operator",
        Rule::unit => "a unit",
        Rule::scale_verb => "`add` or `remove`",
        Rule::deny_rule | Rule::warn_rule | Rule::route_rule | Rule::annotate_rule => {
            "`deny`, `warn`, `route` or `annotate`"
        }
        Rule::use_list => "`.{`",
        Rule::assign_op => "`=`",
        Rule::open_brace => "`{`",
        Rule::close_brace => "`}`",
        Rule::colon => "`:`",
        Rule::arg => "an argument",
        _ => return None,
    })
}

/// Operator precedence, lowest first.
static PRATT: std::sync::LazyLock<PrattParser<Rule>> = std::sync::LazyLock::new(pratt);

fn pratt() -> PrattParser<Rule> {
    PrattParser::new()
        .op(Op::infix(Rule::op_or, Assoc::Left))
        .op(Op::infix(Rule::op_and, Assoc::Left))
        .op(Op::prefix(Rule::op_not))
        .op(Op::infix(Rule::op_eq, Assoc::Left)
            | Op::infix(Rule::op_ne, Assoc::Left)
            | Op::infix(Rule::op_lt, Assoc::Left)
            | Op::infix(Rule::op_le, Assoc::Left)
            | Op::infix(Rule::op_gt, Assoc::Left)
            | Op::infix(Rule::op_ge, Assoc::Left)
            | Op::infix(Rule::op_in, Assoc::Left))
        .op(Op::infix(Rule::op_add, Assoc::Left) | Op::infix(Rule::op_sub, Assoc::Left))
        .op(Op::infix(Rule::op_mul, Assoc::Left) | Op::infix(Rule::op_div, Assoc::Left))
        .op(Op::prefix(Rule::op_neg))
}

struct Builder<'d> {
    file: FileId,
    offset: usize,
    diags: &'d mut Vec<Diagnostic>,
}

/// The end of a pair's text without the whitespace and comments pest's implicit skipping
/// may have swallowed after it.
fn trimmed_end(p: &Pair<'_, Rule>) -> usize {
    let s = p.as_span();
    let text = s.as_str();
    let mut end = text.len();
    loop {
        let trimmed = text.get(..end).unwrap_or("").trim_end();
        end = trimmed.len();
        // A trailing comment: its `#` starts the last line's comment outside any string.
        let line_start = trimmed.rfind('\n').map_or(0, |i| i + 1);
        match comment_start(trimmed.get(line_start..).unwrap_or("")) {
            Some(c) if line_start + c < end => end = line_start + c,
            _ => break,
        }
    }
    s.start() + end
}

/// Where a `#` comment starts in one line, skipping strings.
fn comment_start(line: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '#' if !in_string => return Some(i),
            _ => {}
        }
    }
    None
}

impl Builder<'_> {
    fn span(&self, p: &Pair<'_, Rule>) -> Span {
        let s = p.as_span();
        Span::new(
            self.file,
            self.offset + s.start(),
            self.offset + trimmed_end(p),
        )
    }

    fn ident(&self, p: &Pair<'_, Rule>) -> Ident {
        Ident {
            name: p.as_str().into(),
            span: self.span(p),
        }
    }

    fn item(&mut self, p: Pair<'_, Rule>) -> Option<Item> {
        let span = self.span(&p);
        let kind = match p.as_rule() {
            Rule::use_decl => ItemKind::Use(Box::new(self.use_decl(p))),
            Rule::rule_decl => ItemKind::Rule(Box::new(self.rule_decl(p)?)),
            Rule::block => ItemKind::Block(Box::new(self.block(p)?)),
            _ => return None,
        };
        Some(Item {
            kind,
            span,
            trivia: Trivia::default(),
        })
    }

    fn use_decl(&mut self, p: Pair<'_, Rule>) -> UseDecl {
        let mut path = Vec::new();
        let mut path_span = self.span(&p);
        let mut names = None;
        for c in inner(p) {
            match c.as_rule() {
                Rule::module_path => {
                    path_span = self.span(&c);
                    path = inner(c).map(|i| self.ident(&i)).collect();
                }
                Rule::use_list => names = Some(inner(c).map(|i| self.ident(&i)).collect()),
                _ => {}
            }
        }
        UseDecl {
            path,
            path_span,
            names,
        }
    }

    fn block(&mut self, p: Pair<'_, Rule>) -> Option<Block> {
        let one_line = !p
            .as_str()
            .get(..trimmed_end(&p) - p.as_span().start())
            .unwrap_or("")
            .contains('\n');
        let mut block = Block {
            template: false,
            kind: BlockKind::Pool,
            kind_span: self.span(&p),
            name: None,
            quoted_name: false,
            target: None,
            base: None,
            body: Vec::new(),
            one_line,
            closing: Vec::new(),
        };
        for c in inner(p) {
            match c.as_rule() {
                Rule::kw_template => block.template = true,
                Rule::block_kind => {
                    block.kind = BlockKind::from_keyword(c.as_str())?;
                    block.kind_span = self.span(&c);
                }
                Rule::ident => block.name = Some(self.ident(&c)),
                Rule::string => {
                    let s = self.string(c);
                    block.quoted_name = true;
                    block.name = Some(Ident {
                        name: s.value,
                        span: s.span,
                    });
                }
                Rule::target => block.target = inner(c).next().map(|i| self.ident(&i)),
                Rule::base => block.base = inner(c).next().map(|i| self.ident(&i)),
                Rule::assign | Rule::block | Rule::trigger => {
                    if let Some(s) = self.stmt(c) {
                        block.body.push(s);
                    }
                }
                _ => {}
            }
        }
        // A policy holds every block at once: no spare capacity from the pushes.
        block.body.shrink_to_fit();
        Some(block)
    }

    fn stmt(&mut self, p: Pair<'_, Rule>) -> Option<Stmt> {
        let span = self.span(&p);
        let kind = match p.as_rule() {
            Rule::assign => {
                let mut it = inner(p);
                let key = self.ident(&it.next()?);
                let value = self.value(it.next()?)?;
                StmtKind::Assign { key, value }
            }
            Rule::block => StmtKind::Block(Box::new(self.block(p)?)),
            Rule::trigger => StmtKind::Trigger(Box::new(self.trigger(p)?)),
            _ => return None,
        };
        Some(Stmt {
            kind,
            span,
            trivia: Trivia::default(),
        })
    }

    fn trigger(&mut self, p: Pair<'_, Rule>) -> Option<Trigger> {
        let mut it = inner(p);
        let direction = match it.next()?.as_str() {
            "up" => Direction::Up,
            _ => Direction::Down,
        };
        let condition = self.expr(it.next()?);
        let mut hold = None;
        let mut action = None;
        for c in it {
            match c.as_rule() {
                Rule::hold => hold = inner(c).next().map(|e| self.expr(e)),
                Rule::scale_action => {
                    let mut a = inner(c);
                    let verb = match a.next()?.as_str() {
                        "add" => ScaleVerb::Add,
                        _ => ScaleVerb::Remove,
                    };
                    let amount = self.expr(a.next()?);
                    let nodes_suffix = a.next().is_some();
                    action = Some(ScaleAction {
                        verb,
                        amount,
                        nodes_suffix,
                    });
                }
                _ => {}
            }
        }
        Some(Trigger {
            direction,
            condition,
            hold,
            action,
        })
    }

    fn value(&mut self, p: Pair<'_, Rule>) -> Option<Value> {
        let span = self.span(&p);
        let mut parts = inner(p);
        let first = parts.next()?;
        if first.as_rule() == Rule::windows {
            return Some(Value {
                kind: ValueKind::Windows(Box::new(self.windows(first)?)),
                span,
            });
        }
        let expr = self.expr(first);
        let kind = match parts.next() {
            Some(tail) if tail.as_rule() == Rule::range_tail => {
                ValueKind::Range(Box::new(expr), Box::new(self.expr(inner(tail).next()?)))
            }
            Some(clamp) => {
                let mut bounds = inner(clamp);
                let lo = Box::new(self.expr(bounds.next()?));
                let hi = Box::new(self.expr(bounds.next()?));
                ValueKind::Clamp {
                    expr: Box::new(expr),
                    lo,
                    hi,
                }
            }
            None => ValueKind::Expr(expr),
        };
        Some(Value { kind, span })
    }

    fn windows(&mut self, p: Pair<'_, Rule>) -> Option<Windows> {
        let mut windows = Vec::new();
        let mut zone = None;
        for c in inner(p) {
            match c.as_rule() {
                Rule::window => {
                    let span = self.span(&c);
                    let mut days = None;
                    let mut times = Vec::new();
                    for w in inner(c) {
                        match w.as_rule() {
                            Rule::day_spec => days = Some(self.day_spec(w)),
                            Rule::time_of_day => times.push(self.time(&w)),
                            _ => {}
                        }
                    }
                    let [start, end] = <[TimeLit; 2]>::try_from(times).ok()?;
                    windows.push(Window {
                        days,
                        start,
                        end,
                        span,
                    });
                }
                Rule::string => zone = Some(self.string(c)),
                _ => {}
            }
        }
        Some(Windows { windows, zone })
    }

    fn day_spec(&mut self, p: Pair<'_, Rule>) -> DaySpec {
        let span = self.span(&p);
        let bracketed = p.as_str().starts_with('[');
        let ranges = p
            .into_inner()
            .filter(|r| r.as_rule() == Rule::day_range)
            .filter_map(|r| {
                let mut ids = inner(r);
                let first = self.ident(&ids.next()?);
                let second = ids.next().map(|i| self.ident(&i));
                Some((first, second))
            })
            .collect();
        DaySpec {
            ranges,
            bracketed,
            span,
        }
    }

    fn time(&self, p: &Pair<'_, Rule>) -> TimeLit {
        let (h, m) = p.as_str().split_once(':').unwrap_or(("0", "0"));
        TimeLit {
            hour: h.parse().unwrap_or(99),
            minute: m.parse().unwrap_or(99),
            span: self.span(p),
        }
    }

    fn string(&self, p: Pair<'_, Rule>) -> StrLit {
        let span = self.span(&p);
        let raw: Text = inner(p)
            .next()
            .map(|i| i.as_str().into())
            .unwrap_or_default();
        let mut value = Text::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some(other) => value.push(other),
                    None => {}
                }
            } else {
                value.push(c);
            }
        }
        StrLit { value, raw, span }
    }

    fn rule_decl(&mut self, p: Pair<'_, Rule>) -> Option<RuleDecl> {
        let mut it = inner(p);
        let name = self.ident(&it.next()?);
        let body = it.next()?;
        let action = match body.as_rule() {
            Rule::deny_rule => RuleAction::Deny,
            Rule::warn_rule => RuleAction::Warn,
            Rule::route_rule => RuleAction::Route,
            _ => RuleAction::Annotate,
        };
        let mut parts = inner(body);
        let condition = self.expr(parts.next()?);
        let mut rule = RuleDecl {
            name,
            action,
            condition,
            message: None,
            route_to: None,
            annotation: None,
        };
        match action {
            RuleAction::Deny | RuleAction::Warn => {
                rule.message = parts.next().map(|s| self.string(s))
            }
            RuleAction::Route => {
                rule.route_to = parts.next().map(|i| Box::new(self.ident(&i)));
                rule.message = parts.next().map(|s| self.string(s));
            }
            RuleAction::Annotate => {
                let key = self.string(parts.next()?);
                let value = self.expr(parts.next()?);
                rule.annotation = Some(Box::new((key, value)));
            }
        }
        Some(rule)
    }

    fn expr(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span = self.span(&p);
        let operators = p
            .clone()
            .into_inner()
            .filter(|c| is_operator(c.as_rule()))
            .count();
        if operators > MAX_OPERATORS {
            self.diags.push(
                Diagnostic::new(
                    codes::TOO_LONG,
                    format!("expression has {operators} operators, more than the {MAX_OPERATORS} allowed"),
                )
                .with_label(span, "this expression")
                .with_help("split the condition into several rules"),
            );
            return Expr {
                kind: ExprKind::Error,
                span,
            };
        }
        let file = self.file;
        let offset = self.offset;
        let span_of = |p: &Pair<'_, Rule>| {
            let s = p.as_span();
            Span::new(file, offset + s.start(), offset + s.end())
        };
        // The Pratt closures cannot borrow `self` mutably, so primaries collect their own
        // diagnostics into a local list.
        let mut local = Vec::new();
        let result = {
            let primary = std::cell::RefCell::new(&mut local);
            PRATT
                .map_primary(|a| {
                    let mut guard = primary.borrow_mut();
                    let mut b = Builder {
                        file,
                        offset,
                        diags: &mut guard,
                    };
                    b.primary(a)
                })
                .map_prefix(|op, operand| {
                    let span = span_of(&op).to(operand.span);
                    let op = if op.as_rule() == Rule::op_not {
                        UnaryOp::Not
                    } else {
                        UnaryOp::Neg
                    };
                    Expr {
                        kind: ExprKind::Unary {
                            op,
                            operand: Box::new(operand),
                        },
                        span,
                    }
                })
                .map_infix(|lhs, op, rhs| {
                    let span = lhs.span.to(rhs.span);
                    Expr {
                        kind: ExprKind::Binary {
                            op: binary_op(op.as_rule()),
                            lhs: Box::new(lhs),
                            rhs: Box::new(rhs),
                        },
                        span,
                    }
                })
                .parse(inner(p))
        };
        self.diags.extend(local);
        result
    }

    fn primary(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span = self.span(&p);
        let kind = match p.as_rule() {
            Rule::paren => match inner(p).next() {
                Some(e) => ExprKind::Paren(Box::new(self.expr(e))),
                None => ExprKind::Error,
            },
            Rule::list => ExprKind::List(inner(p).map(|e| self.expr(e)).collect()),
            Rule::name_expr => {
                let mut it = inner(p);
                let Some(first) = it.next().map(|f| self.ident(&f)) else {
                    return Expr {
                        kind: ExprKind::Error,
                        span,
                    };
                };
                let rest: Vec<Pair<'_, Rule>> = it.collect();
                match rest.first() {
                    Some(args) if args.as_rule() == Rule::call_args => {
                        let args = inner(args.clone())
                            .map(|a| {
                                let parts: Vec<_> = inner(a).collect();
                                match parts.as_slice() {
                                    [k, v] => Arg {
                                        name: Some(self.ident(k)),
                                        value: self.expr(v.clone()),
                                    },
                                    [v] => Arg {
                                        name: None,
                                        value: self.expr(v.clone()),
                                    },
                                    _ => Arg {
                                        name: None,
                                        value: Expr {
                                            kind: ExprKind::Error,
                                            span,
                                        },
                                    },
                                }
                            })
                            .collect();
                        ExprKind::Call(Box::new(Call { func: first, args }))
                    }
                    _ => {
                        // Sized up front: most paths are one or two names, and `push`
                        // would leave room for four in every one.
                        let mut path = Vec::with_capacity(1 + rest.len());
                        path.push(first);
                        for f in rest {
                            if let Some(k) = inner(f).next() {
                                path.push(self.ident(&k));
                            }
                        }
                        ExprKind::Path(path)
                    }
                }
            }
            Rule::time_of_day => ExprKind::Time(self.time(&p)),
            Rule::quantity => {
                let mut it = inner(p);
                let text: Text = it.next().map(|n| n.as_str().into()).unwrap_or_default();
                let value = text.replace('_', "").parse::<f64>().unwrap_or(f64::NAN);
                let unit = it.next().map(|u| {
                    let mut id = self.ident(&u);
                    // `500m gpu` is written with any spacing; keep one canonical spelling.
                    if let Some(rest) = id.name.strip_prefix('m') {
                        if rest.starts_with([' ', '\t']) {
                            id.name = compact_str::format_compact!("m {}", rest.trim());
                        }
                    }
                    id
                });
                ExprKind::Quantity(Box::new(Quantity { text, value, unit }))
            }
            Rule::string => ExprKind::Str(Box::new(self.string(p))),
            Rule::bool_lit => ExprKind::Bool(p.as_str() == "true"),
            Rule::none_lit => ExprKind::None,
            Rule::self_lit => ExprKind::SelfRef,
            _ => ExprKind::Error,
        };
        Expr { kind, span }
    }
}

/// Children of a pair without the keyword tokens, which carry no information.
fn inner(p: Pair<'_, Rule>) -> impl Iterator<Item = Pair<'_, Rule>> {
    p.into_inner().filter(|c| !is_keyword(c.as_rule()))
}

fn is_keyword(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::kw_use
            | Rule::kw_rule
            | Rule::kw_if
            | Rule::kw_in
            | Rule::kw_to
            | Rule::kw_with
            | Rule::kw_for
            | Rule::kw_when
            | Rule::kw_clamp
            | Rule::kw_from
            | Rule::kw_deny
            | Rule::kw_warn
            | Rule::kw_route
            | Rule::kw_annotate
            | Rule::assign_op
            | Rule::open_brace
            | Rule::close_brace
            | Rule::colon
    )
}

fn is_operator(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::op_or
            | Rule::op_and
            | Rule::op_eq
            | Rule::op_ne
            | Rule::op_lt
            | Rule::op_le
            | Rule::op_gt
            | Rule::op_ge
            | Rule::op_add
            | Rule::op_sub
            | Rule::op_mul
            | Rule::op_div
            | Rule::op_in
            | Rule::op_not
            | Rule::op_neg
    )
}

fn binary_op(rule: Rule) -> BinaryOp {
    match rule {
        Rule::op_or => BinaryOp::Or,
        Rule::op_and => BinaryOp::And,
        Rule::op_eq => BinaryOp::Eq,
        Rule::op_ne => BinaryOp::Ne,
        Rule::op_lt => BinaryOp::Lt,
        Rule::op_le => BinaryOp::Le,
        Rule::op_gt => BinaryOp::Gt,
        Rule::op_ge => BinaryOp::Ge,
        Rule::op_add => BinaryOp::Add,
        Rule::op_sub => BinaryOp::Sub,
        Rule::op_mul => BinaryOp::Mul,
        Rule::op_div => BinaryOp::Div,
        _ => BinaryOp::In,
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, reason = "test code")]
mod tests {
    use super::*;

    fn rules(n: usize) -> String {
        (0..n)
            .map(|i| {
                format!(
                    "rule r{i}: warn if job.gpus > {} gpu and job.tier == standard \"rule {i}\"\n",
                    i % 64 + 1
                )
            })
            .collect()
    }

    fn whole(text: &str) -> (Vec<Item>, Vec<Diagnostic>) {
        let (mut items, mut diags) = (Vec::new(), Vec::new());
        assert!(parse_chunk(0, text, 0..text.len(), &mut items, &mut diags));
        (items, diags)
    }

    #[test]
    fn a_large_file_parsed_in_parts_is_the_file_parsed_whole() {
        let text = format!(
            "use std.tiers\n\n{}team t {{\n  guaranteed = 8 gpu\n}}\n{}",
            rules(2_000),
            rules(1_000)
        );
        assert!(text.len() > 3 * PART_BYTES);
        let (mut items, mut diags) = (Vec::new(), Vec::new());
        assert!(parse_in_parts(0, &text, &mut items, &mut diags));
        assert!(diags.is_empty());
        assert_eq!((items, diags), whole(&text));
        assert_eq!(parse(0, &text).0.items.len(), 3_002);
    }

    #[test]
    fn a_part_boundary_inside_a_block_falls_back_to_the_whole_file() {
        // `pool = p` in the first column looks like the start of an item to the chunker;
        // the text before the block is sized so that a part ends just before it.
        let mut head = rules(780);
        assert!(head.len() < PART_BYTES - 100);
        head.push_str(&format!(
            "#{}\n",
            "x".repeat(PART_BYTES - 5 - head.len() - 2)
        ));
        let text = format!("{head}team t {{\npool = p\n}}\n{}", rules(1_000));
        let (mut items, mut diags) = (Vec::new(), Vec::new());
        assert!(!parse_in_parts(0, &text, &mut items, &mut diags));
        assert!(items.is_empty() && diags.is_empty());
        let (ast, diags) = parse(0, &text);
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(ast.items.len(), 1_781);
    }
}
