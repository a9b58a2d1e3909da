//! The registry of diagnostic codes: one source of truth for severities, titles and the long
//! explanations that `gantry explain CODE` prints. Every example here is checked by a test to
//! produce its code, and every fix to be free of it.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One diagnostic code and its documentation.
#[derive(Debug, Clone, Copy)]
pub struct CodeInfo {
    pub code: &'static str,
    pub title: &'static str,
    pub explanation: &'static str,
    /// A policy that produces this code; empty where no policy text can (I/O findings).
    pub example: &'static str,
    /// The same policy, corrected.
    pub fix: &'static str,
    /// For codes no policy text can show (I/O findings, size limits): an example in words.
    pub illustration: &'static str,
}

impl CodeInfo {
    pub fn severity(&self) -> Severity {
        severity(self.code)
    }

    /// The long form printed by `gantry explain`.
    pub fn long_form(&self) -> String {
        let mut out = format!(
            "{}[{}]: {}\n\n{}\n",
            self.severity().as_str(),
            self.code,
            self.title,
            self.explanation.trim()
        );
        if !self.illustration.is_empty() {
            out.push_str("\nFor example: ");
            out.push_str(self.illustration.trim());
            out.push('\n');
        }
        if !self.example.is_empty() {
            out.push_str("\nFor example, this policy:\n\n");
            out.push_str(&indent(self.example));
            out.push_str("\ncan be fixed like this:\n\n");
            out.push_str(&indent(self.fix));
        }
        out
    }
}

fn indent(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("    {l}\n")
            }
        })
        .collect()
}

pub fn lookup(code: &str) -> Option<&'static CodeInfo> {
    let code = code.trim().to_ascii_uppercase();
    CODES.iter().find(|c| c.code == code)
}

/// Codes starting with `W` are warnings; all others are errors.
pub fn severity(code: &str) -> Severity {
    if code.starts_with('W') {
        Severity::Warning
    } else {
        Severity::Error
    }
}

pub const INVALID_UTF8: &str = "E0100";
pub const SYNTAX: &str = "E0101";
pub const TOO_DEEP: &str = "E0102";
pub const TOO_LONG: &str = "E0103";
pub const EMPTY_FILE: &str = "E0104";
pub const UNTERMINATED_STRING: &str = "E0105";
pub const UNKNOWN_NAME: &str = "E0201";
pub const UNKNOWN_MODULE: &str = "E0202";
pub const DUPLICATE: &str = "E0203";
pub const WRONG_KIND: &str = "E0204";
pub const UNKNOWN_FIELD: &str = "E0205";
pub const MISSING_FIELD: &str = "E0206";
pub const FIELD_TWICE: &str = "E0207";
pub const MISPLACED_BLOCK: &str = "E0208";
pub const UNKNOWN_FUNCTION: &str = "E0209";
pub const BAD_ARGUMENTS: &str = "E0210";
pub const NOT_IN_CONTEXT: &str = "E0211";
pub const UNIT_MISMATCH: &str = "E0301";
pub const TYPE_MISMATCH: &str = "E0302";
pub const UNKNOWN_UNIT: &str = "E0303";
pub const UNKNOWN_TIMEZONE: &str = "E0304";
pub const BAD_TIME: &str = "E0305";
pub const OUT_OF_RANGE: &str = "E0306";
pub const UNKNOWN_VARIANT: &str = "E0307";
pub const UNKNOWN_DAY: &str = "E0308";
pub const DECIMAL_BYTES: &str = "W0309";
pub const GUARANTEE_EXCEEDS_POOL: &str = "E0401";
pub const LEND_EXCEEDS_GUARANTEE: &str = "E0402";
pub const GUARANTEE_EXCEEDS_BURST: &str = "E0403";
pub const UNUSABLE_TIER: &str = "W0404";
pub const SHADOWED_RULE: &str = "W0405";
pub const EMPTY_WINDOW: &str = "E0406";
pub const OVERLAPPING_WINDOWS: &str = "W0407";
pub const STEP_CANNOT_FIT_GANG: &str = "E0408";
pub const BAD_MIG_PROFILE: &str = "E0409";
pub const POOL_CANNOT_HOLD_GANG: &str = "E0410";
pub const WARM_ABOVE_MAX: &str = "E0411";
pub const SPEND_CAP_BELOW_NODE: &str = "E0412";
pub const TWO_DEFAULTS: &str = "E0413";
pub const IMPLAUSIBLE_DURATION: &str = "W0414";
pub const LEGACY_TIMEZONE: &str = "W0415";
pub const LEND_WITHOUT_COHORT: &str = "W0416";
pub const GPU_ID_SHADOWS_STDLIB: &str = "W0417";
pub const CLAMP_ABOVE_MAX: &str = "W0418";
pub const MIG_START_NOT_ALLOWED: &str = "W0419";
pub const MIN_RUNTIME_OVER_MAX_LOST: &str = "W0420";
pub const TEAM_WITHOUT_SUBMITTERS: &str = "W0421";
pub const OVERLAPPING_BINDINGS: &str = "W0422";
pub const OPEN_TEAM_BESIDE_BOUND: &str = "W0423";
pub const TEAM_CAN_RUN_NOTHING: &str = "W0424";
pub const BURST_NEVER_REACHED: &str = "W0425";

pub const CODES: &[CodeInfo] = &[
    CodeInfo {
        code: INVALID_UTF8,
        title: "file is not valid UTF-8",
        explanation: "Policy files are UTF-8 text. The file contains a byte sequence that is not UTF-8, \
often because it was saved in another encoding (Latin-1, UTF-16) or is not a text file at all. \
The diagnostic points at the first invalid byte. Re-save the file as UTF-8.",
        example: "",
        fix: "",
        illustration: "a file saved as Latin-1 holding `tier café { priority = 1 }` has the single byte 0xE9 where \
UTF-8 expects a two-byte sequence for `é`; `iconv -f latin1 -t utf-8 old.gantry > new.gantry` converts it.",
    },
    CodeInfo {
        code: SYNTAX,
        title: "syntax error",
        explanation: "The parser met a token it did not expect. The message lists what would have been \
valid at that point. Parsing resumes at the next top-level definition (a line starting with \
`pool`, `tier`, `team`, `rule`, ... in the first column), so one run reports every broken definition.",
        example: "tier critical { priority = = 1000 }\n",
        fix: "tier critical { priority = 1000 }\n",
        illustration: "",
    },
    CodeInfo {
        code: TOO_DEEP,
        title: "nesting too deep",
        explanation: "Parentheses, brackets and braces may nest at most 64 levels. Deeper nesting is \
almost always generated or corrupted text, and refusing it keeps the checker from running out of stack.",
        example: "rule r: deny if ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((job.gpus > 1 gpu)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))) \"no\"\n",
        fix: "rule r: deny if job.gpus > 1 gpu \"no\"\n",
        illustration: "",
    },
    CodeInfo {
        code: TOO_LONG,
        title: "expression too long",
        explanation: "One expression may combine at most 256 operators. Split long conditions into several \
rules; each rule can carry its own message, which also makes denials easier to understand.",
        example: "",
        fix: "",
        illustration: "a generated rule `deny if job.team == a or job.team == b or ...` naming 300 teams has 599 \
operators; write `deny if job.team in [a, b, ...] \"...\"` instead, or one rule per group of teams.",
    },
    CodeInfo {
        code: EMPTY_FILE,
        title: "policy file defines nothing",
        explanation: "A policy file holds no definitions (it is empty or holds only comments). An empty file \
in a policy directory is usually a mistake, such as a truncated save. Add definitions or delete the file.",
        example: "# nothing here yet\n",
        fix: "tier standard { priority = 500 }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNTERMINATED_STRING,
        title: "unterminated string",
        explanation: "A string starts with `\"` but the line ends before the closing `\"`. Strings cannot span \
lines; use `\\\"` for a quote inside a string.",
        example: "rule r: deny if job.vram == none \"declare vram\n",
        fix: "rule r: deny if job.vram == none \"declare vram\"\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_NAME,
        title: "unknown name",
        explanation: "A name is used that no definition in this policy, nor any `use` import, provides. \
Names resolve across all files of a policy directory and the standard-library modules it imports. \
The help line suggests a close name when there is one.",
        example: "tier standard { priority = 500 }\nteam ml { guaranteed = 8 gpu; tiers = [standrd] }\n",
        fix: "tier standard { priority = 500 }\nteam ml { guaranteed = 8 gpu; tiers = [standard] }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_MODULE,
        title: "unknown module",
        explanation: "A `use` names a module that does not exist. Standard-library modules are `std.gpus`, \
`std.nodes`, `std.tiers`, `std.templates.three_tier` and `std.templates.spot_burst`. Definitions in \
other files of the same policy directory need no `use`: they are always in scope.",
        example: "use std.node\n",
        fix: "use std.nodes\n",
        illustration: "",
    },
    CodeInfo {
        code: DUPLICATE,
        title: "duplicate definition",
        explanation: "Two definitions share a name. Pools, tiers, teams, cohorts, rules, warm pools, GPU models \
and node shapes live in one namespace per policy, so a name means one thing wherever it is used. \
A local definition may hide a name brought in by a whole-module `use`, but not one imported by name. \
A policy has at most one `placement` block and one `autoscale` block per pool.",
        example: "tier standard { priority = 500 }\ntier standard { priority = 400 }\n",
        fix: "tier standard { priority = 500 }\ntier batch { priority = 400 }\n",
        illustration: "",
    },
    CodeInfo {
        code: WRONG_KIND,
        title: "name refers to the wrong kind of definition",
        explanation: "A name resolves, but to another kind of definition than the place requires: a tier where a \
pool is expected, say. `from` must name a block of the same kind.",
        example: "tier standard { priority = 500 }\nrule r: route if job.preemptions >= 2 to standard\n",
        fix: "use std.nodes\ntier standard { priority = 500 }\npool dgx { capacity = reserved; node = dgx_h100; nodes = 2 }\nrule r: route if job.preemptions >= 2 to dgx\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_FIELD,
        title: "unknown field",
        explanation: "A block sets a field its kind does not have. Each block kind has a fixed set of fields \
(see the language tour in README.md); the help line suggests the closest one.",
        example: "tier standard { priority = 500; preemption = never }\n",
        fix: "tier standard { priority = 500; preempt = never }\n",
        illustration: "",
    },
    CodeInfo {
        code: MISSING_FIELD,
        title: "missing required field",
        explanation: "A block lacks a field without which it means nothing: a pool needs its node shape and node \
count, a tier its priority, a GPU model its memory, a node shape its GPUs.",
        example: "tier standard { preempt = never }\n",
        fix: "tier standard { priority = 500; preempt = never }\n",
        illustration: "",
    },
    CodeInfo {
        code: FIELD_TWICE,
        title: "field set twice",
        explanation: "A block sets the same field twice. Only one value can hold, and silently taking the last one would hide a copy-and-paste mistake, so both places are shown. Remove one of them.",
        example: "tier standard { priority = 500; priority = 400 }\n",
        fix: "tier standard { priority = 500 }\n",
        illustration: "",
    },
    CodeInfo {
        code: MISPLACED_BLOCK,
        title: "block not allowed here",
        explanation: "Blocks nest only where they mean something: `team` inside `cohort`, `mig` inside `gpu`. \
Everything else is defined at the top level of a file. `template` marks a top-level block that \
other blocks copy with `from`; it is not part of the policy by itself.",
        example: "tier standard { priority = 500\n  team ml { guaranteed = 8 gpu }\n}\n",
        fix: "tier standard { priority = 500 }\nteam ml { guaranteed = 8 gpu }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_FUNCTION,
        title: "unknown function",
        explanation: "A call names no built-in function. Built-ins are the arithmetic helpers `ceil`, `floor`, \
`round`, `min`, `max`; the signals `pending_gpus`, `pending_nodes`, `pending_jobs`, `running_gpus`, \
`utilization`, `queue_wait`, `idle`; the histories `concurrent_starts` and `gpu_demand`; the statistics \
`p50`, `p75`, `p90`, `p95`, `p99`, `mean`, `peak` over a history; and `prefer`/`require` for topology.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = p80(concurrent_starts(), over = 14d) }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = p75(concurrent_starts(), over = 14d) }\n",
        illustration: "",
    },
    CodeInfo {
        code: BAD_ARGUMENTS,
        title: "wrong arguments",
        explanation: "A function was called with the wrong number of arguments, an argument name it does not \
take, or an argument of the wrong kind. The message says what the function expects.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 0..4 }\nautoscale dgx { up when pending_gpus(nodes = dgx) > 0 gpu => add 1 nodes }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 0..4 }\nautoscale dgx { up when pending_gpus(fits = dgx) > 0 gpu => add 1 nodes }\n",
        illustration: "",
    },
    CodeInfo {
        code: NOT_IN_CONTEXT,
        title: "not available here",
        explanation: "Some values only exist in one place: job fields (`job.gpus`, `job.tier`, ...) only in rule \
conditions; `idle` only in an autoscale `down` trigger; `self` only in templates, `warm` and `autoscale` \
blocks, where it names the pool.",
        example: "tier standard { priority = job.gpus }\n",
        fix: "tier standard { priority = 500 }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNIT_MISMATCH,
        title: "mismatched units",
        explanation: "An operator combines values whose units do not fit together, such as bytes plus a \
duration, or compares GPUs with nodes. Units are types in Gantry: `+`, `-` and comparisons need the \
same unit on both sides; `*` and `/` take a plain number on one side (or divide like units to get a \
number, or money by time to get a rate). Both operands are labelled with their types.",
        example: "rule big: deny if job.vram > 80 GiB + 2h \"too large\"\n",
        fix: "rule big: deny if job.vram > 80 GiB \"too large\"\n",
        illustration: "",
    },
    CodeInfo {
        code: TYPE_MISMATCH,
        title: "wrong type of value",
        explanation: "A field or operand needs a value of one type and got another: a node count where GPUs are \
needed, a number without a unit where a quantity is expected, a string where a name is expected. \
Plain numbers are accepted for counts (nodes, priority, weights); quantities need their unit.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 gpu }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_UNIT,
        title: "unknown unit",
        explanation: "A number carries a unit Gantry does not know. Units: `gpu`/`gpus` (and `m gpu` for \
milli-GPUs, as in `500m gpu`), `node`/`nodes`, `KiB` `MiB` `GiB` `TiB` (and decimal `KB` `MB` `GB` `TB`), \
`s` `m` `h` `d` `w`, `$`, `$/h`, `%`.",
        example: "team ml { guaranteed = 8 gpuz }\n",
        fix: "team ml { guaranteed = 8 gpu }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_TIMEZONE,
        title: "unknown time zone",
        explanation: "Time windows take an IANA time-zone name such as `\"Europe/Berlin\"` or `\"America/New_York\"`, \
so that windows follow daylight-saving changes. Abbreviations like `CET` or fixed offsets are \
ambiguous across the year and are not accepted (except `\"UTC\"`).",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = weekdays 08:00..19:00 \"Europe/Berln\" }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = weekdays 08:00..19:00 \"Europe/Berlin\" }\n",
        illustration: "",
    },
    CodeInfo {
        code: BAD_TIME,
        title: "invalid time of day",
        explanation: "A time of day is written `HH:MM` with hours 0 to 24 and minutes 0 to 59; `24:00` means \
the end of the day.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = 08:00..25:00 \"UTC\" }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = 08:00..24:00 \"UTC\" }\n",
        illustration: "",
    },
    CodeInfo {
        code: OUT_OF_RANGE,
        title: "value out of range",
        explanation: "A value has the right unit but cannot be meant: a negative count, a percentage above 100, \
a range whose lower end is above its upper end, a fractional GPU count above one GPU per member.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 8..2 }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 2..8 }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_VARIANT,
        title: "unknown option",
        explanation: "A field takes one of a fixed set of words (`capacity = reserved | on_demand | spot`, \
`preempt = never | after_checkpoint | immediately`, `packing = least_fragmentation | best_fit | spread | gpu_packing`, ...) \
and got another word. The message lists the options.",
        example: "tier standard { priority = 500; preempt = sometimes }\n",
        fix: "tier standard { priority = 500; preempt = after_checkpoint }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNKNOWN_DAY,
        title: "unknown day",
        explanation: "Days in a time window are `mon` `tue` `wed` `thu` `fri` `sat` `sun`, ranges like `mon..fri`, \
lists like `[mon, wed]`, or `weekdays`, `weekends` and `daily`.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = mon..fry 08:00..19:00 \"UTC\" }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = mon..fri 08:00..19:00 \"UTC\" }\n",
        illustration: "",
    },
    CodeInfo {
        code: DECIMAL_BYTES,
        title: "decimal byte unit",
        explanation: "`GB` is 10^9 bytes, `GiB` is 2^30. GPU and host memory are sized in binary units (an \
\"80GB\" H100 has 80 GiB), so `GB` in a policy is usually a mistake that makes a limit 7% too small. \
Write `GiB`; if you meant decimal bytes, the warning can be ignored.",
        example: "rule big: deny if job.vram > 80 GB \"too large\"\n",
        fix: "rule big: deny if job.vram > 80 GiB \"too large\"\n",
        illustration: "",
    },
    CodeInfo {
        code: GUARANTEE_EXCEEDS_POOL,
        title: "guarantee exceeds what the pool can ever hold",
        explanation: "A team is guaranteed more GPUs in a pool than the pool holds at its largest size \
(maximum nodes times GPUs per node), or all teams' guarantees in a pool add up to more than that. \
A guarantee that cannot be met is a promise the scheduler will break at the worst time. Lower the \
guarantees or grow the pool.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 2 }\nteam ml { guaranteed = 24 gpu in dgx }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 2 }\nteam ml { guaranteed = 16 gpu in dgx }\n",
        illustration: "",
    },
    CodeInfo {
        code: LEND_EXCEEDS_GUARANTEE,
        title: "team lends more than it is guaranteed",
        explanation: "A team can only lend its own idle guaranteed GPUs to its cohort; `lend` above \
`guaranteed` would lend capacity the team does not have.",
        example: "cohort research {\n  team ml { guaranteed = 8 gpu; lend = 16 gpu }\n}\n",
        fix: "cohort research {\n  team ml { guaranteed = 8 gpu; lend = 8 gpu }\n}\n",
        illustration: "",
    },
    CodeInfo {
        code: GUARANTEE_EXCEEDS_BURST,
        title: "guarantee is above the burst limit",
        explanation: "`burst` is the most a team may use, borrowing included, so it cannot be below what the team \
is guaranteed. Raise `burst` or lower `guaranteed`.",
        example: "team ml { guaranteed = 16 gpu; burst = 8 gpu }\n",
        fix: "team ml { guaranteed = 16 gpu; burst = 24 gpu }\n",
        illustration: "",
    },
    CodeInfo {
        code: UNUSABLE_TIER,
        title: "no team may use this tier",
        explanation: "Every team restricts its tiers with `tiers = [...]`, and none lists this tier, so no job \
can ever run in it. Add it to a team's tiers or remove it.",
        example: "tier critical { priority = 1000 }\ntier standard { priority = 500 }\nteam ml { guaranteed = 8 gpu; tiers = [standard] }\n",
        fix: "tier critical { priority = 1000 }\ntier standard { priority = 500 }\nteam ml { guaranteed = 8 gpu; tiers = [critical, standard] }\n",
        illustration: "",
    },
    CodeInfo {
        code: SHADOWED_RULE,
        title: "rule can never fire",
        explanation: "Admission rules run in order (files in path order, rules in file order); the first `deny` \
ends evaluation and the first matching `route` wins. A later rule whose condition implies an earlier \
`deny` or `route` condition (the same condition, or more conditions joined with `and`, or a tighter \
comparison of the same field) is never reached. Reorder the rules or narrow the earlier one.",
        example: "rule big: deny if job.gpus > 8 gpu \"too big\"\nrule huge: deny if job.gpus > 64 gpu \"much too big\"\n",
        fix: "rule huge: deny if job.gpus > 64 gpu \"much too big\"\nrule big: deny if job.gpus > 8 gpu \"too big\"\n",
        illustration: "",
    },
    CodeInfo {
        code: EMPTY_WINDOW,
        title: "empty time window",
        explanation: "A time window starts and ends at the same time, so it is never active. A window may wrap \
past midnight (`22:00..06:00`); to mean all day write `00:00..24:00`.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = weekdays 08:00..08:00 \"UTC\" }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = weekdays 08:00..18:00 \"UTC\" }\n",
        illustration: "",
    },
    CodeInfo {
        code: OVERLAPPING_WINDOWS,
        title: "overlapping time windows",
        explanation: "Two windows of the same warm pool, or of two warm pools on the same pool, are active at the \
same time, so which size applies is ambiguous. Make the windows disjoint.",
        example: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = weekdays 08:00..12:00, weekdays 11:00..19:00 \"UTC\" }\n",
        fix: "use std.nodes\npool dgx { capacity = reserved; node = dgx_h100; nodes = 4 }\nwarm w in dgx { size = 1 nodes; during = weekdays 08:00..12:00, weekdays 12:00..19:00 \"UTC\" }\n",
        illustration: "",
    },
    CodeInfo {
        code: STEP_CANNOT_FIT_GANG,
        title: "autoscale step can never fit the largest gang",
        explanation: "An autoscale `up` step adds a fixed number of nodes whose GPUs together are fewer than the \
largest gang the pool admits (`max_gang`), so a waiting gang of that size never fits in what one \
step adds. Scale by demand (`add pending_nodes(fits = self)`) or raise the step.",
        example: "use std.nodes\npool spot { capacity = spot; node = p4d_24xlarge; nodes = 0..8; max_gang = 32 gpu }\nautoscale spot { up when pending_gpus(fits = spot) > 0 gpu for 2m => add 1 nodes }\n",
        fix: "use std.nodes\npool spot { capacity = spot; node = p4d_24xlarge; nodes = 0..8; max_gang = 32 gpu }\nautoscale spot { up when pending_gpus(fits = spot) > 0 gpu for 2m => add 4 nodes }\n",
        illustration: "",
    },
    CodeInfo {
        code: BAD_MIG_PROFILE,
        title: "invalid MIG profile",
        explanation: "A MIG profile of a GPU model does not fit the GPU: its memory is larger than the GPU's, its \
compute slices exceed the GPU's slice count, or a start position leaves no room for the profile's \
slices. NVIDIA places each profile only at fixed start positions (for example, `3g` profiles start \
at slice 0 or 4 on an H100).",
        example: "gpu toy {\n  id = \"TOY\"; memory = 40 GiB; mig_slots = 8\n  mig \"3g.20gb\" { compute = 3; memory = 20 GiB; width = 4; starts = [0, 5] }\n}\n",
        fix: "gpu toy {\n  id = \"TOY\"; memory = 40 GiB; mig_slots = 8\n  mig \"3g.20gb\" { compute = 3; memory = 20 GiB; width = 4; starts = [0, 4] }\n}\n",
        illustration: "",
    },
    CodeInfo {
        code: POOL_CANNOT_HOLD_GANG,
        title: "pool can never hold its largest gang",
        explanation: "A pool admits gangs up to `max_gang` GPUs but holds fewer GPUs than that even at its largest \
size, so such a gang would wait forever. Lower `max_gang` or raise the pool's maximum node count.",
        example: "use std.nodes\npool small { capacity = on_demand; node = g5_xlarge; nodes = 0..4; max_gang = 8 gpu }\n",
        fix: "use std.nodes\npool small { capacity = on_demand; node = g5_xlarge; nodes = 0..8; max_gang = 8 gpu }\n",
        illustration: "",
    },
    CodeInfo {
        code: WARM_ABOVE_MAX,
        title: "warm target above the pool's maximum",
        explanation: "A warm pool keeps at least this many nodes ready (its constant size, or the lower end of its \
`clamp`), but the pool it keeps warm can never have that many nodes. The autoscaler would chase a target \
it can never reach. Lower the warm size or raise the pool's maximum.",
        example: "use std.nodes\npool dgx { capacity = on_demand; node = dgx_h100; nodes = 0..2 }\nwarm w in dgx { size = 3 nodes }\n",
        fix: "use std.nodes\npool dgx { capacity = on_demand; node = dgx_h100; nodes = 0..4 }\nwarm w in dgx { size = 3 nodes }\n",
        illustration: "",
    },
    CodeInfo {
        code: SPEND_CAP_BELOW_NODE,
        title: "spend cap below one node",
        explanation: "`max_spend` caps what a pool may cost per hour, all its nodes (booting ones too) together. A cap \
below the price of one node (or of the pool's minimum nodes) means the autoscaler can never add a node. \
Raise the cap or pick a cheaper node shape.",
        example: "use std.nodes\npool spot { capacity = spot; node = p5_48xlarge; nodes = 0..4; cost = 39.80 $/h }\nautoscale spot { up when pending_nodes(fits = spot) > 0 nodes for 1m => add 1 nodes; max_spend = 20 $/h }\n",
        fix: "use std.nodes\npool spot { capacity = spot; node = p5_48xlarge; nodes = 0..4; cost = 39.80 $/h }\nautoscale spot { up when pending_nodes(fits = spot) > 0 nodes for 1m => add 1 nodes; max_spend = 160 $/h }\n",
        illustration: "",
    },
    CodeInfo {
        code: TWO_DEFAULTS,
        title: "more than one default tier or team",
        explanation: "`default = true` names the tier (or team) a job gets when it names none, as Kubernetes' \
PriorityClass `globalDefault` does. Only one tier and one team may be the default, or a job without a tier \
(team) would have two. Keep `default = true` on one of them.",
        example: "tier low { priority = 100; preempt = immediately; default = true }\ntier lower { priority = 50; preempt = immediately; default = true }\n",
        fix: "tier low { priority = 100; preempt = immediately; default = true }\ntier lower { priority = 50; preempt = immediately }\n",
        illustration: "",
    },
    CodeInfo {
        code: IMPLAUSIBLE_DURATION,
        title: "duration outside the usual range for its field",
        explanation: "The value checks, but it is far outside what the field is used for, which usually means \
a unit slipped: `half_life = 7m` forgets fair-share usage within minutes when days were meant, `idle > 15h` \
keeps idle nodes (and their cost) for most of a day, `boot = 10h` makes the autoscaler wait hours for a node. \
Each duration field has a range (`half_life` 1h to 365d, `grace` up to 2h, `max_lost` 1m to 7d, `reclaim_within` up to 7d, \
`min_runtime` up to 7d, `default_runtime` 1m to 30d, `boot` 10s to 2h, `notice` 10s to 1h, `gang_timeout` \
1m to 7d, `reserve_after_wait` 1m to 30d, cooldowns 10s to 1d, `idle >` in a scale-down trigger 1m to 6h). \
When the same number in another unit falls in the range, the help names it and `--format json` carries the \
edit. If the value is really meant, keep it and say why in a comment.",
        example: "cohort research { fair_share = drf; half_life = 7m }\n",
        fix: "cohort research { fair_share = drf; half_life = 7d }\n",
        illustration: "",
    },
    CodeInfo {
        code: LEGACY_TIMEZONE,
        title: "legacy or fixed-offset time zone",
        explanation: "A warm pool's windows follow the clock of their zone. Names like `EST`, `MST`, `PST8PDT`, \
`CET` or `US/Pacific` are kept in the IANA database only for compatibility, and some have no summer time \
(`EST` is UTC-5 all year, so a window written for New York office hours starts an hour late from March to \
November). `Etc/GMT+5` is a fixed offset, with the sign inverted (it is UTC-5). Name the place instead: \
`\"America/New_York\"`, `\"Europe/Berlin\"`.",
        example: "use std.nodes\npool dgx { capacity = on_demand; node = dgx_h100; nodes = 0..4 }\nwarm office in dgx { size = 1 nodes; during = weekdays 08:00..18:00 \"EST\" }\n",
        fix: "use std.nodes\npool dgx { capacity = on_demand; node = dgx_h100; nodes = 0..4 }\nwarm office in dgx { size = 1 nodes; during = weekdays 08:00..18:00 \"America/New_York\" }\n",
        illustration: "",
    },
    CodeInfo {
        code: LEND_WITHOUT_COHORT,
        title: "a team lends but belongs to no cohort",
        explanation: "Teams borrow each other's idle guarantees only inside a cohort (Kueue's ClusterQueue cohort). \
A team outside every cohort has no one to lend to, so its `lend` does nothing. Put the team in a `cohort` \
block, or set `cohort = NAME`, or remove `lend`.",
        example: "use std.tiers\nteam vision { guaranteed = 16 gpu; lend = 8 gpu }\n",
        fix: "use std.tiers\ncohort research {\n  team vision { guaranteed = 16 gpu; lend = 8 gpu }\n}\n",
        illustration: "",
    },
    CodeInfo {
        code: GPU_ID_SHADOWS_STDLIB,
        title: "a GPU model reuses a standard id",
        explanation: "Inventories (NVML, fleet files, node labels) name GPUs by `id`. A model of the policy's own \
with the id of a standard-library model means a node reporting that id matches two models, with possibly \
different memory or MIG profiles. Import the standard model (`use std.gpus.{h100_sxm5_80gb}`), or give \
yours an id of its own.",
        example: "gpu my_h100 { id = \"H100-SXM5-80GB\"; memory = 81559 MiB }\n",
        fix: "gpu my_h100 { id = \"H100-SXM5-80GB-custom\"; memory = 81559 MiB }\n",
        illustration: "",
    },
    CodeInfo {
        code: CLAMP_ABOVE_MAX,
        title: "a warm clamp above the pool's maximum",
        explanation: "The upper bound of a warm pool's `clamp` is more than its pool can ever hold, so it never \
binds: the warm pool stops at the pool's maximum. Usually the pool's `nodes` range was lowered and the \
clamp kept. Lower the clamp, or raise the pool's maximum.",
        example: "use std.nodes\npool dgx { capacity = on_demand; node = dgx_h100; nodes = 0..4 }\nwarm w in dgx { size = p75(concurrent_starts(pool = dgx), over = 14d, by = hour_of_week) clamp 1..8 nodes }\n",
        fix: "use std.nodes\npool dgx { capacity = on_demand; node = dgx_h100; nodes = 0..4 }\nwarm w in dgx { size = p75(concurrent_starts(pool = dgx), over = 14d, by = hour_of_week) clamp 1..4 nodes }\n",
        illustration: "",
    },
    CodeInfo {
        code: MIG_START_NOT_ALLOWED,
        title: "a MIG profile starts where NVIDIA does not place it",
        explanation: "NVIDIA places a MIG instance only at slots that are a multiple of its width (a 4-slot \
`3g.40gb` at 0 or 4), and on 8-slot GPUs (A100, H100, H200) its compute slices must end by slice 7 (a \
`4g.40gb` only at 0). A start the driver never uses makes the placer count MIG room that does not exist. \
`nvidia-smi mig -lgipp` prints the real placements as `{starts}:width`.",
        example: "gpu g { id = \"G-80GB\"; memory = 81559 MiB; mig_slots = 8\n  mig \"4g.40gb\" { compute = 4; memory = 40192 MiB; width = 4; starts = [0, 4] }\n}\n",
        fix: "gpu g { id = \"G-80GB\"; memory = 81559 MiB; mig_slots = 8\n  mig \"4g.40gb\" { compute = 4; memory = 40192 MiB; width = 4; starts = [0] }\n}\n",
        illustration: "",
    },
    CodeInfo {
        code: MIN_RUNTIME_OVER_MAX_LOST,
        title: "min_runtime longer than max_lost",
        explanation: "An `after_checkpoint` tier protects a job for `min_runtime`, then lets it be preempted while \
the work since its last checkpoint is under `max_lost`. With `min_runtime` longer than `max_lost`, a job \
that has not checkpointed by then already has more than `max_lost` at stake, so it cannot be preempted \
until it checkpoints, and a job that never checkpoints never can. Make `min_runtime` at most `max_lost`, \
or keep it and say why in a comment.",
        example: "tier standard { priority = 500; preempt = after_checkpoint; min_runtime = 2h; max_lost = 30m }\n",
        fix: "tier standard { priority = 500; preempt = after_checkpoint; min_runtime = 20m; max_lost = 30m }\n",
        illustration: "",
    },
    CodeInfo {
        code: TEAM_WITHOUT_SUBMITTERS,
        title: "a team no one can submit as",
        explanation: "`namespaces`, `users` and `groups` say who may submit as a team: the admission webhook \
checks each pod's namespace and the identity that created it against them. An empty list admits no one, \
so every pod naming the team is denied. List who may submit as the team, or leave the field out to leave \
that part open.",
        example: "team vision { guaranteed = 8 gpu; namespaces = [] }\n",
        fix: "team vision { guaranteed = 8 gpu; namespaces = [\"vision\"] }\n",
        illustration: "",
    },
    CodeInfo {
        code: OVERLAPPING_BINDINGS,
        title: "teams bound to overlapping namespaces",
        explanation: "Two teams admit the same namespace (and, where they name users or groups, the same \
identities). A pod there cannot take its team from its namespace: it must name one with the \
`gantry.dev/team` label, and a pod that names none is denied unless the default team is one of them. \
That may be what you want (two teams sharing a namespace); if not, give each team namespaces of its own.",
        example: "team vision { guaranteed = 8 gpu; namespaces = [\"ml-*\"] }\nteam nlp { guaranteed = 8 gpu; namespaces = [\"ml-nlp\"] }\n",
        fix: "team vision { guaranteed = 8 gpu; namespaces = [\"ml-vision\"] }\nteam nlp { guaranteed = 8 gpu; namespaces = [\"ml-nlp\"] }\n",
        illustration: "",
    },
    CodeInfo {
        code: OPEN_TEAM_BESIDE_BOUND,
        title: "an open team beside bound teams",
        explanation: "Some teams say who may submit as them (`namespaces`, `users`, `groups`) and this one \
says nothing, so a pod in any namespace, from any user, may name it and use its quota and tiers. Bind \
it too, or say in a comment why it is open to everyone.",
        example: "team vision { guaranteed = 8 gpu; namespaces = [\"vision\"] }\nteam product { guaranteed = 8 gpu }\n",
        fix: "team vision { guaranteed = 8 gpu; namespaces = [\"vision\"] }\nteam product { guaranteed = 8 gpu; namespaces = [\"product\"] }\n",
        illustration: "",
    },
    CodeInfo {
        code: TEAM_CAN_RUN_NOTHING,
        title: "a team that can never run a job",
        explanation: "A tier with `preempt = never` runs only inside its team's guarantee, since a lender \
could never take the GPUs back. This team is guaranteed nothing and every tier it may use is never \
preempted (and none says `borrow = true`), so every job it submits waits for ever as `never_fits`. \
Give the team a guarantee, let it use a tier that may be preempted, or set `borrow = true` on the tier.",
        example: "tier critical { priority = 1000; preempt = never }\nteam ml { burst = 16 gpu; tiers = [critical] }\n",
        fix: "tier critical { priority = 1000; preempt = never }\nteam ml { guaranteed = 8 gpu; tiers = [critical] }\n",
        illustration: "",
    },
    CodeInfo {
        code: BURST_NEVER_REACHED,
        title: "a burst the team can never use",
        explanation: "A tier with `preempt = never` runs only inside its team's guarantee, since a lender \
could never take the GPUs back. Every tier this team may use is never preempted (and none says \
`borrow = true`), so its jobs never run past its guarantee and its `burst` above the guarantee is \
never reached: a job that needs more waits, however idle the cluster. Lower `burst` to the \
guarantee, let the team use a tier that may be preempted, or set `borrow = true` on the tier.",
        example: "tier critical { priority = 1000; preempt = never }\nteam ml { guaranteed = 8 gpu; burst = 16 gpu; tiers = [critical] }\n",
        fix: "tier critical { priority = 1000; preempt = never }\ntier batch { priority = 100; preempt = immediately }\nteam ml { guaranteed = 8 gpu; burst = 16 gpu; tiers = [critical, batch] }\n",
        illustration: "",
    },
];
