//! The syntax tree: what the parser builds and the formatter prints. Comments ride along as
//! [`Trivia`] on items and statements; spans point into the [`crate::SourceMap`].

use crate::source::Span;
/// Names and string literals are short: kept inline (up to 24 bytes) rather than each in a
/// heap allocation of its own, as a large policy holds every one of them.
pub use compact_str::CompactString as Text;

#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub name: Text,
    pub span: Span,
}

/// A comment, including its leading `#`.
#[derive(Debug, Clone, PartialEq)]
pub struct Comment {
    pub text: String,
    pub span: Span,
    /// Whether a blank line follows the comment (kept by the formatter).
    pub blank_after: bool,
}

/// Comments and blank lines around an item or statement, kept for the formatter.
#[derive(Debug, Clone, Default)]
pub struct Trivia {
    /// Boxed and absent without comments: most nodes have none, and a large policy holds
    /// every node at once.
    comments: Option<Box<Comments>>,
    /// Whether a blank line separated this node from the previous one.
    pub blank_before: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Comments {
    leading: Vec<Comment>,
    trailing: Vec<Comment>,
}

impl Trivia {
    /// No comments, no blank line before.
    pub const EMPTY: Trivia = Trivia {
        comments: None,
        blank_before: false,
    };

    /// Comments on their own lines just before the node (the doc comment of a definition).
    pub fn leading(&self) -> &[Comment] {
        self.comments.as_ref().map_or(&[], |c| &c.leading)
    }

    /// Comments inside the node or after it on its last line.
    pub fn trailing(&self) -> &[Comment] {
        self.comments.as_ref().map_or(&[], |c| &c.trailing)
    }

    pub fn trailing_mut(&mut self) -> &mut Vec<Comment> {
        &mut self.comments.get_or_insert_with(Default::default).trailing
    }

    /// Adds trailing comments; no box is made for none.
    pub fn extend_trailing(&mut self, comments: impl IntoIterator<Item = Comment>) {
        let mut comments = comments.into_iter().peekable();
        if comments.peek().is_some() {
            self.trailing_mut().extend(comments);
        }
    }

    /// Sets the leading comments; no box is made for none.
    pub fn set_leading(&mut self, leading: Vec<Comment>) {
        if leading.is_empty() && self.comments.is_none() {
            return;
        }
        self.comments.get_or_insert_with(Default::default).leading = leading;
    }
}

/// By content: a node whose comments were taken away equals one that never had any.
impl PartialEq for Trivia {
    fn eq(&self, other: &Trivia) -> bool {
        self.blank_before == other.blank_before
            && self.leading() == other.leading()
            && self.trailing() == other.trailing()
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct File {
    pub items: Vec<Item>,
    /// Comments after the last item.
    pub dangling: Vec<Comment>,
    /// Names defined in text that did not parse: already reported, so their uses are not
    /// reported again as unknown.
    pub broken: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub kind: ItemKind,
    pub span: Span,
    pub trivia: Trivia,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ItemKind {
    /// Each kind boxed: an item is then 48 bytes, and a policy's items are one list. A
    /// rule inline made every item of a mixed policy rule-sized (208 bytes).
    Use(Box<UseDecl>),
    Block(Box<Block>),
    Rule(Box<RuleDecl>),
}

/// `use std.nodes` or `use std.nodes.{dgx_h100, p4d_24xlarge}`.
#[derive(Debug, Clone, PartialEq)]
pub struct UseDecl {
    pub path: Vec<Ident>,
    pub path_span: Span,
    pub names: Option<Vec<Ident>>,
}

impl UseDecl {
    pub fn module(&self) -> String {
        self.path
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(".")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockKind {
    Pool,
    Tier,
    Cohort,
    Team,
    Placement,
    Warm,
    Autoscale,
    Gpu,
    Node,
    Mig,
}

impl BlockKind {
    pub const ALL: [BlockKind; 10] = [
        BlockKind::Pool,
        BlockKind::Tier,
        BlockKind::Cohort,
        BlockKind::Team,
        BlockKind::Placement,
        BlockKind::Warm,
        BlockKind::Autoscale,
        BlockKind::Gpu,
        BlockKind::Node,
        BlockKind::Mig,
    ];

    pub fn keyword(self) -> &'static str {
        match self {
            BlockKind::Pool => "pool",
            BlockKind::Tier => "tier",
            BlockKind::Cohort => "cohort",
            BlockKind::Team => "team",
            BlockKind::Placement => "placement",
            BlockKind::Warm => "warm",
            BlockKind::Autoscale => "autoscale",
            BlockKind::Gpu => "gpu",
            BlockKind::Node => "node",
            BlockKind::Mig => "mig",
        }
    }

    pub fn from_keyword(word: &str) -> Option<BlockKind> {
        BlockKind::ALL.into_iter().find(|k| k.keyword() == word)
    }
}

/// `[template] KIND [NAME] [in TARGET] [from BASE] { statements }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub template: bool,
    pub kind: BlockKind,
    pub kind_span: Span,
    pub name: Option<Ident>,
    /// Whether the name was written as a string (`mig "1g.10gb"`).
    pub quoted_name: bool,
    pub target: Option<Ident>,
    pub base: Option<Ident>,
    pub body: Vec<Stmt>,
    /// Whether the whole block was written on one line (the formatter keeps short ones so).
    pub one_line: bool,
    /// Comments between the opening brace's line and the closing brace, after the last statement.
    pub closing: Vec<Comment>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
    pub trivia: Trivia,
}

/// Nested blocks and triggers are boxed: a large policy is mostly assignments, and every
/// statement of a block's body is as large as the largest kind.
#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    Assign { key: Ident, value: Value },
    Block(Box<Block>),
    Trigger(Box<Trigger>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub kind: ValueKind,
    pub span: Span,
}

/// The rarer kinds are boxed so that a value stays the size of one expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    Expr(Expr),
    Range(Box<Expr>, Box<Expr>),
    Clamp {
        expr: Box<Expr>,
        lo: Box<Expr>,
        hi: Box<Expr>,
    },
    Windows(Box<Windows>),
}

/// `weekdays 08:00..19:00, sat 10:00..14:00 "Europe/Berlin"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Windows {
    pub windows: Vec<Window>,
    pub zone: Option<StrLit>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub days: Option<DaySpec>,
    pub start: TimeLit,
    pub end: TimeLit,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DaySpec {
    /// Each entry is a day or a range `mon..fri`.
    pub ranges: Vec<(Ident, Option<Ident>)>,
    pub bracketed: bool,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLit {
    pub hour: u32,
    pub minute: u32,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StrLit {
    /// The unescaped value.
    pub value: Text,
    /// The text between the quotes, escapes kept, for the formatter.
    pub raw: Text,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
}

/// `up when COND for HOLD => add AMOUNT nodes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    pub direction: Direction,
    pub condition: Expr,
    pub hold: Option<Expr>,
    pub action: Option<ScaleAction>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleVerb {
    Add,
    Remove,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScaleAction {
    pub verb: ScaleVerb,
    pub amount: Expr,
    /// `add ceil(x) nodes`: the trailing `nodes` makes the amount a node count.
    pub nodes_suffix: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    Deny,
    Warn,
    Route,
    Annotate,
}

impl RuleAction {
    pub fn keyword(self) -> &'static str {
        match self {
            RuleAction::Deny => "deny",
            RuleAction::Warn => "warn",
            RuleAction::Route => "route",
            RuleAction::Annotate => "annotate",
        }
    }
}

/// `rule NAME: deny if COND "message"` and its route / warn / annotate forms.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleDecl {
    pub name: Ident,
    pub action: RuleAction,
    pub condition: Expr,
    pub message: Option<StrLit>,
    /// Boxed, as few rules route.
    pub route_to: Option<Box<Ident>>,
    /// Boxed: few rules annotate, and a large policy holds every rule.
    pub annotation: Option<Box<(StrLit, Expr)>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    In,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "or",
            BinaryOp::And => "and",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::In => "in",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
}

/// A number as written and its value; `unit` is the word after it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantity {
    pub text: Text,
    pub value: f64,
    pub unit: Option<Ident>,
}

/// `func(args)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub func: Ident,
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    // The larger payloads are boxed so that an expression node stays small: a large
    // policy holds every node of every rule.
    Quantity(Box<Quantity>),
    Time(TimeLit),
    Str(Box<StrLit>),
    Bool(bool),
    None,
    SelfRef,
    /// `name` or `job.vram`.
    Path(Vec<Ident>),
    Call(Box<Call>),
    List(Vec<Expr>),
    Paren(Box<Expr>),
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// Stands in for an expression that failed to build (already reported).
    Error,
}
