//! The formatter: prints a syntax tree in the one canonical style (two-space indents, one
//! statement per line, no semicolons, short one-line blocks kept on one line), with every
//! comment kept. Formatting is idempotent and does not change what a policy means.

use crate::diagnostic::Diagnostic;
use crate::syntax::ast::*;

/// Blocks written on one line stay so if they fit in this many columns.
const ONE_LINE_WIDTH: usize = 100;
const INDENT: &str = "  ";

/// Formats a file's text. Files with syntax errors are not formatted: their diagnostics
/// come back instead, and the text is left alone.
pub fn format_source(text: &str) -> Result<String, Vec<Diagnostic>> {
    let (file, diags) = crate::syntax::parse(0, text);
    let syntax_errors: Vec<Diagnostic> = diags
        .into_iter()
        .filter(|d| d.is_error() && d.code != crate::codes::EMPTY_FILE)
        .collect();
    if !syntax_errors.is_empty() {
        return Err(syntax_errors);
    }
    Ok(format_file(&file))
}

pub fn format_file(file: &File) -> String {
    let mut p = Printer { out: String::new() };
    let mut prev_multiline = false;
    for (i, item) in file.items.iter().enumerate() {
        let multiline = is_multiline_item(item);
        if i > 0 && (item.trivia.blank_before || multiline || prev_multiline) {
            p.out.push('\n');
        }
        p.comments(item.trivia.leading(), 0);
        p.indent(0);
        match &item.kind {
            ItemKind::Use(u) => {
                p.use_decl(u);
                p.trailing(item.trivia.trailing(), 0);
            }
            ItemKind::Rule(r) => p.rule(r, item.span.end, item.trivia.trailing()),
            ItemKind::Block(b) => {
                p.block(b, 0);
                p.trailing(item.trivia.trailing(), 0);
            }
        }
        prev_multiline = multiline;
    }
    if !file.dangling.is_empty() {
        if !file.items.is_empty() {
            p.out.push('\n');
        }
        p.comments(&file.dangling, 0);
    }
    while p.out.ends_with("\n\n") {
        p.out.pop();
    }
    p.out
}

fn is_multiline_item(item: &Item) -> bool {
    match &item.kind {
        ItemKind::Block(b) => !fits_one_line(b),
        _ => false,
    }
}

/// Whether a block prints on one line: written so, simple, uncommented and short.
fn fits_one_line(b: &Block) -> bool {
    if !b.one_line || !b.closing.is_empty() {
        return false;
    }
    let simple = b.body.iter().all(|s| {
        matches!(s.kind, StmtKind::Assign { .. })
            && s.trivia.leading().is_empty()
            && s.trivia.trailing().is_empty()
    });
    simple && one_line_text(b).len() <= ONE_LINE_WIDTH
}

fn one_line_text(b: &Block) -> String {
    let mut p = Printer { out: String::new() };
    p.block_header(b);
    if b.body.is_empty() {
        p.out.push_str("{}");
        return p.out;
    }
    p.out.push_str("{ ");
    for (i, s) in b.body.iter().enumerate() {
        if i > 0 {
            p.out.push_str("; ");
        }
        p.stmt_body(s, 0);
    }
    p.out.push_str(" }");
    p.out
}

struct Printer {
    out: String,
}

impl Printer {
    fn indent(&mut self, level: usize) {
        for _ in 0..level {
            self.out.push_str(INDENT);
        }
    }

    fn comments(&mut self, comments: &[Comment], level: usize) {
        for c in comments {
            self.indent(level);
            self.out.push_str(c.text.trim_end());
            self.out.push('\n');
            if c.blank_after {
                self.out.push('\n');
            }
        }
    }

    /// Ends the current line, with the first trailing comment on it and any others below.
    fn trailing(&mut self, comments: &[Comment], level: usize) {
        let mut rest = comments.iter();
        if let Some(first) = rest.next() {
            self.out.push_str("  ");
            self.out.push_str(first.text.trim_end());
        }
        self.out.push('\n');
        for c in rest {
            self.indent(level);
            self.out.push_str(c.text.trim_end());
            self.out.push('\n');
        }
    }

    fn use_decl(&mut self, u: &UseDecl) {
        self.out.push_str("use ");
        self.out.push_str(&u.module());
        if let Some(names) = &u.names {
            self.out.push_str(".{");
            self.out.push_str(
                &names
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            );
            self.out.push('}');
        }
    }

    /// A rule on one line; or, when comments sit inside it, one operand of the condition's
    /// top-level `and`/`or` chain per line with each comment after the operand it follows
    /// (and the target and message on a line of their own), so that every comment stays
    /// inside the rule and a second pass prints the same text.
    fn rule(&mut self, r: &RuleDecl, end: u32, comments: &[Comment]) {
        self.out.push_str("rule ");
        self.out.push_str(&r.name.name);
        self.out.push_str(": ");
        self.out.push_str(r.action.keyword());
        self.out.push_str(" if ");
        let (inner, after): (Vec<&Comment>, Vec<&Comment>) =
            comments.iter().partition(|c| c.span.start < end);
        if inner.is_empty() {
            self.expr(&r.condition);
            self.rule_suffix(r, " ");
            self.trailing(comments, 0);
            return;
        }
        let mut operands = Vec::new();
        chain(&r.condition, None, &mut operands);
        // Each comment goes with the last operand that ends before it (the first when
        // none does).
        let mut groups: Vec<Vec<&Comment>> = vec![Vec::new(); operands.len()];
        for c in inner {
            let k = operands
                .iter()
                .rposition(|(_, e)| e.span.end <= c.span.start)
                .unwrap_or(0);
            if let Some(g) = groups.get_mut(k) {
                g.push(c);
            }
        }
        for (k, ((op, e), group)) in operands.iter().zip(&groups).enumerate() {
            if k > 0 {
                self.out.push('\n');
                self.indent(1);
                if let Some(op) = op {
                    self.out.push_str(op.symbol());
                    self.out.push(' ');
                }
            }
            self.expr(e);
            self.comment_run(group);
        }
        if r.route_to.is_some() || r.annotation.is_some() || r.message.is_some() {
            self.out.push('\n');
            self.indent(1);
            self.rule_suffix(r, "");
        }
        self.comment_run(&after);
        self.out.push('\n');
    }

    /// A rule's `to`, `with` and message, after `sep` (each further part after a space).
    fn rule_suffix(&mut self, r: &RuleDecl, sep: &str) {
        let mut sep = sep;
        if let Some(pool) = &r.route_to {
            self.out.push_str(sep);
            self.out.push_str("to ");
            self.out.push_str(&pool.name);
            sep = " ";
        }
        if let Some((key, value)) = r.annotation.as_deref() {
            self.out.push_str(sep);
            self.out.push_str("with ");
            self.string(key);
            self.out.push_str(" = ");
            self.expr(value);
            sep = " ";
        }
        if let Some(m) = &r.message {
            self.out.push_str(sep);
            self.string(m);
        }
    }

    /// Comments after a line's code: the first on the line, the rest on their own lines.
    fn comment_run(&mut self, comments: &[&Comment]) {
        for (i, c) in comments.iter().enumerate() {
            if i == 0 {
                self.out.push_str("  ");
            } else {
                self.out.push('\n');
                self.indent(1);
            }
            self.out.push_str(c.text.trim_end());
        }
    }

    fn block_header(&mut self, b: &Block) {
        if b.template {
            self.out.push_str("template ");
        }
        self.out.push_str(b.kind.keyword());
        self.out.push(' ');
        if let Some(n) = &b.name {
            if b.quoted_name {
                self.out.push('"');
                self.out
                    .push_str(&n.name.replace('\\', "\\\\").replace('"', "\\\""));
                self.out.push('"');
            } else {
                self.out.push_str(&n.name);
            }
            self.out.push(' ');
        }
        if let Some(t) = &b.target {
            self.out.push_str("in ");
            self.out.push_str(&t.name);
            self.out.push(' ');
        }
        if let Some(base) = &b.base {
            self.out.push_str("from ");
            self.out.push_str(&base.name);
            self.out.push(' ');
        }
    }

    /// Prints a block; the caller has indented its first line, the block ends its last.
    fn block(&mut self, b: &Block, level: usize) {
        if fits_one_line(b) {
            self.out.push_str(&one_line_text(b));
            return;
        }
        self.block_header(b);
        self.out.push('{');
        self.out.push('\n');
        for (i, s) in b.body.iter().enumerate() {
            if i > 0 && s.trivia.blank_before {
                self.out.push('\n');
            }
            self.comments(s.trivia.leading(), level + 1);
            self.indent(level + 1);
            self.stmt_body(s, level + 1);
            self.trailing(s.trivia.trailing(), level + 1);
        }
        self.comments(&b.closing, level + 1);
        if self.out.ends_with("\n\n") {
            self.out.pop();
        }
        self.indent(level);
        self.out.push('}');
    }

    fn stmt_body(&mut self, s: &Stmt, level: usize) {
        match &s.kind {
            StmtKind::Assign { key, value } => {
                self.out.push_str(&key.name);
                self.out.push_str(" = ");
                self.value(value);
            }
            StmtKind::Block(b) => self.block(b, level),
            StmtKind::Trigger(t) => {
                self.out.push_str(match t.direction {
                    Direction::Up => "up when ",
                    Direction::Down => "down when ",
                });
                self.expr(&t.condition);
                if let Some(h) = &t.hold {
                    self.out.push_str(" for ");
                    self.expr(h);
                }
                if let Some(a) = &t.action {
                    self.out.push_str(match a.verb {
                        ScaleVerb::Add => " => add ",
                        ScaleVerb::Remove => " => remove ",
                    });
                    self.expr(&a.amount);
                    if a.nodes_suffix {
                        self.out.push_str(" nodes");
                    }
                }
            }
        }
    }

    fn value(&mut self, v: &Value) {
        match &v.kind {
            ValueKind::Expr(e) => self.expr(e),
            ValueKind::Range(lo, hi) => {
                self.expr(lo);
                self.out.push_str("..");
                self.expr(hi);
            }
            ValueKind::Clamp { expr, lo, hi } => {
                self.expr(expr);
                self.out.push_str(" clamp ");
                self.expr(lo);
                self.out.push_str("..");
                self.expr(hi);
            }
            ValueKind::Windows(w) => {
                for (i, window) in w.windows.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    if let Some(d) = &window.days {
                        self.days(d);
                        self.out.push(' ');
                    }
                    self.time(&window.start);
                    self.out.push_str("..");
                    self.time(&window.end);
                }
                if let Some(z) = &w.zone {
                    self.out.push(' ');
                    self.string(z);
                }
            }
        }
    }

    fn days(&mut self, d: &DaySpec) {
        let parts: Vec<String> = d
            .ranges
            .iter()
            .map(|(a, b)| match b {
                Some(b) => format!("{}..{}", a.name, b.name),
                None => a.name.to_string(),
            })
            .collect();
        if d.bracketed {
            self.out.push('[');
            self.out.push_str(&parts.join(", "));
            self.out.push(']');
        } else {
            self.out.push_str(&parts.join(", "));
        }
    }

    fn time(&mut self, t: &TimeLit) {
        self.out.push_str(&format!("{:02}:{:02}", t.hour, t.minute));
    }

    fn string(&mut self, s: &StrLit) {
        self.out.push('"');
        self.out.push_str(&s.raw);
        self.out.push('"');
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Quantity(q) => {
                let (text, unit) = (&q.text, &q.unit);
                self.out.push_str(text);
                if let Some(u) = unit {
                    let attached = matches!(u.name.as_str(), "s" | "m" | "h" | "d" | "w" | "%")
                        || u.name.starts_with("m ");
                    if !attached {
                        self.out.push(' ');
                    }
                    self.out.push_str(&u.name);
                }
            }
            ExprKind::Time(t) => self.time(t),
            ExprKind::Str(s) => self.string(s),
            ExprKind::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            ExprKind::None => self.out.push_str("none"),
            ExprKind::SelfRef => self.out.push_str("self"),
            ExprKind::Path(parts) => {
                self.out.push_str(
                    &parts
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join("."),
                );
            }
            ExprKind::Call(call) => {
                let (func, args) = (&call.func, &call.args);
                self.out.push_str(&func.name);
                self.out.push('(');
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    if let Some(n) = &a.name {
                        self.out.push_str(&n.name);
                        self.out.push_str(" = ");
                    }
                    self.expr(&a.value);
                }
                self.out.push(')');
            }
            ExprKind::List(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.expr(item);
                }
                self.out.push(']');
            }
            ExprKind::Paren(inner) => {
                self.out.push('(');
                self.expr(inner);
                self.out.push(')');
            }
            ExprKind::Unary { op, operand } => {
                self.out.push_str(match op {
                    UnaryOp::Not => "not ",
                    UnaryOp::Neg => "-",
                });
                self.expr(operand);
            }
            ExprKind::Binary { op, lhs, rhs } => {
                self.expr(lhs);
                self.out.push(' ');
                self.out.push_str(op.symbol());
                self.out.push(' ');
                self.expr(rhs);
            }
            ExprKind::Error => {}
        }
    }
}

/// The operands of `e`'s top-level `and`/`or` chain in source order, each with the
/// operator before it. Printing them in order with their operators gives back `e`'s
/// tokens (the printer adds no parentheses), so any split between them parses the same.
fn chain<'e>(e: &'e Expr, op: Option<BinaryOp>, out: &mut Vec<(Option<BinaryOp>, &'e Expr)>) {
    match &e.kind {
        ExprKind::Binary {
            op: inner @ (BinaryOp::And | BinaryOp::Or),
            lhs,
            rhs,
        } => {
            chain(lhs, op, out);
            chain(rhs, Some(*inner), out);
        }
        _ => out.push((op, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::format_source;

    #[test]
    fn comments_inside_a_rule_stay_after_the_operand_they_follow() {
        let text = "use std.tiers\nteam a { guaranteed = 8 gpu }\n\
                    rule big: deny if job.gpus > 8 gpu # too big\n  and job.tier == best_effort # only sweeps\n  \
                    # (a note on its own line)\n  or job.team == a\n  \"no\" # why\n";
        let expected = "use std.tiers\nteam a { guaranteed = 8 gpu }\n\
                        rule big: deny if job.gpus > 8 gpu  # too big\n  and job.tier == best_effort  # only sweeps\n  \
                        # (a note on its own line)\n  or job.team == a\n  \"no\"  # why\n";
        let once = format_source(text).unwrap_or_default();
        assert_eq!(once, expected);
        assert_eq!(format_source(&once).unwrap_or_default(), once);
    }

    #[test]
    fn a_rule_without_inner_comments_stays_on_one_line() {
        let text = "rule r: deny if job.gpus > 8 gpu\n  and job.tier == best_effort \"no\" # why\n";
        assert_eq!(
            format_source(text).unwrap_or_default(),
            "rule r: deny if job.gpus > 8 gpu and job.tier == best_effort \"no\"  # why\n"
        );
    }
}
